find_package(Threads REQUIRED)

# LibTorch: Debian's libtorch-dev (1.13, CPU) by default, or a PyTorch install's copy through
# -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
find_package(Torch REQUIRED)
add_library(Torch::Torch INTERFACE IMPORTED)
target_link_libraries(Torch::Torch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(Torch::Torch INTERFACE ${TORCH_CXX_FLAGS})
foreach(dir ${TORCH_INCLUDE_DIRS})
  target_include_directories(Torch::Torch SYSTEM INTERFACE ${dir})
endforeach()
message(STATUS "ooze: LibTorch ${Torch_VERSION}")
# LibTorch's headers require C++20 from 2.13 on (an #error in ATen's headers otherwise).
if(Torch_VERSION VERSION_GREATER_EQUAL 2.13 AND CMAKE_CXX_STANDARD LESS 20)
  message(STATUS "ooze: LibTorch ${Torch_VERSION} needs C++20; compiling as C++20")
  set(CMAKE_CXX_STANDARD 20)
endif()

# Users' Python hooks run in an embedded CPython: by default Debian's /usr/bin/python3, whose
# python3-torch is the same LibTorch build ooze links (a python3 earlier on PATH, from pyenv or a
# venv, may be another build without torch). With a PyTorch install's LibTorch, name its
# interpreter: -DPython3_EXECUTABLE=/path/to/python3.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python that runs users' hooks")
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Embed)
find_package(pybind11 CONFIG REQUIRED)
message(STATUS "ooze: Python hooks run in ${Python3_EXECUTABLE} (${Python3_VERSION})")

# Gloo: Debian's libgloo by default. A PyTorch install links its own Gloo into libtorch_cpu; where
# that copy's symbols are exported, a second Gloo in the same process would interpose on it, so
# -DOOZE_GLOO_FROM_TORCH=ON compiles against the Gloo headers that install ships and links no
# other (scripts/gpu/check.sh decides).
option(OOZE_GLOO_FROM_TORCH "Use the Gloo inside LibTorch (headers under its include directory)" OFF)
if(OOZE_GLOO_FROM_TORCH)
  find_path(OOZE_TORCH_GLOO_INCLUDE gloo/context.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(NOT OOZE_TORCH_GLOO_INCLUDE)
    message(FATAL_ERROR "ooze: OOZE_GLOO_FROM_TORCH, but LibTorch ships no gloo/context.h")
  endif()
  add_library(gloo INTERFACE IMPORTED)
  target_link_libraries(gloo INTERFACE Torch::Torch)
  set(GLOO_INCLUDE_DIRS ${OOZE_TORCH_GLOO_INCLUDE})
else()
  find_package(Gloo REQUIRED)
endif()
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)

find_path(OOZE_CEREAL_INCLUDE cereal/cereal.hpp REQUIRED)
find_path(OOZE_ZMQ_INCLUDE zmq.hpp REQUIRED)
# Boost.Beast and Boost.Asio, header-only (serving/).
find_path(OOZE_BOOST_INCLUDE boost/beast.hpp REQUIRED)
find_library(OOZE_ZMQ_LIB zmq REQUIRED)
find_path(OOZE_PCRE2_INCLUDE pcre2.h REQUIRED)
find_library(OOZE_PCRE2_LIB pcre2-8 REQUIRED)
add_library(PCRE2::pcre2 INTERFACE IMPORTED)
target_include_directories(PCRE2::pcre2 SYSTEM INTERFACE ${OOZE_PCRE2_INCLUDE})
target_link_libraries(PCRE2::pcre2 INTERFACE ${OOZE_PCRE2_LIB})
target_compile_definitions(PCRE2::pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)
# ICU's NFC normalizer: Qwen's tokenizer.json normalizes input with NFC before splitting.
find_package(ICU REQUIRED COMPONENTS uc)

# zlib: its CRC-32 checks every checkpoint file on save and load (core/checksum.cpp).
find_package(ZLIB REQUIRED)

# Protocol Buffers: TensorBoard's event messages (core/proto/), compiled by protoc at build time.
# Debian's protobuf ships no CMake package, so CMake's FindProtobuf module finds it.
find_package(Protobuf REQUIRED)
if(NOT TARGET protobuf::protoc)
  message(FATAL_ERROR
    "ooze: protoc not found; run scripts/install-deps.sh (Debian package protobuf-compiler)")
endif()

# NCCL + CUDA runtime: the NCCL backend compiles whenever both are found, so it never rots,
# even with a CPU-only LibTorch.
set(OOZE_HAVE_NCCL OFF)
if(OOZE_WITH_NCCL)
  find_package(CUDAToolkit QUIET)
  find_path(OOZE_NCCL_INCLUDE nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include ENV NCCL_HOME
            PATH_SUFFIXES include)
  # NAMES libnccl.so.2: the NCCL of PyTorch's pip packages (nvidia-nccl-*) has no unversioned link.
  find_library(OOZE_NCCL_LIB NAMES nccl libnccl.so.2
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 ENV NCCL_HOME
               PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND OOZE_NCCL_INCLUDE AND OOZE_NCCL_LIB)
    set(OOZE_HAVE_NCCL ON)
    message(STATUS "ooze: NCCL backend enabled (${OOZE_NCCL_LIB})")
  else()
    message(STATUS "ooze: NCCL backend disabled (nccl.h or the CUDA runtime not found)")
  endif()
endif()

# A CUDA-enabled LibTorch (from a PyTorch install) lets the NCCL backend use the caller's stream.
set(OOZE_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(OOZE_TORCH_HAS_CUDA ON)
  message(STATUS "ooze: LibTorch has CUDA")
endif()
