# ccache with the sloppiness that precompiled headers need (otherwise every PCH user misses).
# CCACHE_BASEDIR makes paths under the checkout relative in the cache key, so a second clone or
# worktree of ooze (CI's, say) reuses what the first compiled.
find_program(OOZE_CCACHE ccache)
if(OOZE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
      ${OOZE_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
