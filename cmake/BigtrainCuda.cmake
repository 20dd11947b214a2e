# Decides whether the CUDA backend is built. AUTO builds it when nvcc, cuBLAS and
# cuDNN are all present; ON makes their absence an error; OFF never looks.
set(BIGTRAIN_HAVE_CUDA OFF)
if(NOT BIGTRAIN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
    if(CUDAToolkit_FOUND AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
      set(BIGTRAIN_HAVE_CUDA ON)
    endif()
  endif()
  if(BIGTRAIN_CUDA STREQUAL "ON" AND NOT BIGTRAIN_HAVE_CUDA)
    message(FATAL_ERROR "BIGTRAIN_CUDA=ON but the CUDA toolkit (nvcc, cuBLAS) or cuDNN was not found")
  endif()
endif()

if(BIGTRAIN_HAVE_CUDA)
  # Every architecture CUDA 13 builds from Turing on, as cubins (T4, A100, RTX 30xx,
  # RTX 40xx/L4, H100/H200), plus PTX of the newest, which the driver JIT-compiles
  # on later cards (Blackwell). CMAKE_CUDA_ARCHITECTURES, when given, wins; a CI or a
  # single-card user can pass -DBIGTRAIN_CUDA_ARCHS=90 for a shorter build. The
  # list is compiled into the binary (kernels/core/cuda_arch.hpp), so a card it has
  # no code for is a clear error at startup.
  set(BIGTRAIN_CUDA_ARCHS "75-real;80-real;86-real;89-real;90" CACHE STRING
    "CUDA architectures (CMake CUDA_ARCHITECTURES syntax) when CMAKE_CUDA_ARCHITECTURES is not set")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "${BIGTRAIN_CUDA_ARCHS}")
  endif()
  message(STATUS "bigtrain CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag; teach it, so CUDA sources use
  # the same dialect as the rest of the project.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  add_library(bigtrain_cudnn INTERFACE)
  target_include_directories(bigtrain_cudnn INTERFACE ${CUDNN_INCLUDE_DIR})
  # cuBLAS is not linked: kernels/cuda/cublas_lazy.cpp loads it on first use (why:
  # there); its headers come with the toolkit's include directories.
  target_link_libraries(bigtrain_cudnn INTERFACE ${CUDNN_LIBRARY} CUDA::cudart ${CMAKE_DL_LIBS})
  set(BIGTRAIN_CUBLAS_SONAME "libcublas.so.${CUDAToolkit_VERSION_MAJOR}")
endif()

# NCCL (shipped with the CUDA toolkit) sums the gradients of data-parallel ranks on
# their GPUs (pipeline/distributed_nccl*). Its communicator is bootstrapped over MPI,
# so it is only looked for when both the CUDA backend and MPI are built.
set(BIGTRAIN_HAVE_NCCL OFF)
if(BIGTRAIN_HAVE_CUDA AND MPI_CXX_FOUND)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(BIGTRAIN_HAVE_NCCL ON)
    add_library(bigtrain_nccl INTERFACE)
    target_include_directories(bigtrain_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(bigtrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
if(NOT MPI_CXX_FOUND)
  message(STATUS "bigtrain distributed: single process only (MPI not found: install libopenmpi-dev)")
elseif(BIGTRAIN_HAVE_NCCL)
  message(STATUS "bigtrain distributed: MPI on CPU tensors, NCCL on CUDA tensors (${NCCL_LIBRARY})")
elseif(BIGTRAIN_HAVE_CUDA)
  message(STATUS "bigtrain distributed: MPI on CPU tensors; CUDA tensors through host copies (NCCL not found)")
else()
  message(STATUS "bigtrain distributed: MPI on CPU tensors (no CUDA backend, so no NCCL)")
endif()
