# Precompiled headers. Parsing LibTorch's headers dominates compile time; REUSE_FROM makes the
# cost once per build, not once per target.
#   ooze_pch:       ATen (tensors only), for most targets
#   ooze_torch_pch: the whole C++ frontend (<torch/torch.h>: nn modules, autograd, optim), for
#                   the few folders that build models (models/, fsdp/)
set(OOZE_PCH_COMMON_HEADERS
  <nlohmann/json.hpp> <string> <vector> <memory> <map> <functional> <sstream>)

add_library(ooze_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(ooze_pch PUBLIC Torch::Torch)
target_compile_options(ooze_pch PRIVATE -Wall -Wextra)
target_precompile_headers(ooze_pch PRIVATE
  <ATen/ATen.h> ${OOZE_PCH_COMMON_HEADERS})

add_library(ooze_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(ooze_torch_pch PUBLIC Torch::Torch)
target_compile_options(ooze_torch_pch PRIVATE -Wall -Wextra)
target_precompile_headers(ooze_torch_pch PRIVATE
  <torch/torch.h> ${OOZE_PCH_COMMON_HEADERS})

function(ooze_use_pch target)
  target_precompile_headers(${target} REUSE_FROM ooze_pch)
endfunction()

function(ooze_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM ooze_torch_pch)
endfunction()
