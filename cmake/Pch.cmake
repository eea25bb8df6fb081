# One precompiled header shared by every target that uses LibTorch. Parsing ATen's headers
# dominates compile time; REUSE_FROM makes the cost once per build, not once per target.
add_library(ooze_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(ooze_pch PUBLIC Torch::Torch)
target_compile_options(ooze_pch PRIVATE -Wall -Wextra)
target_precompile_headers(ooze_pch PRIVATE
  <ATen/ATen.h>
  <nlohmann/json.hpp>
  <string>
  <vector>
  <memory>
  <map>
  <functional>
  <sstream>)

function(ooze_use_pch target)
  target_precompile_headers(${target} REUSE_FROM ooze_pch)
endfunction()
