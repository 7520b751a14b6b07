# The CUDA driver backend. Needs only the toolkit's headers (for the driver API's types) and
# nvcc (for one PTX generation step); the library is compiled by the host compiler and never
# links libcuda or cudart: libcuda.so.1 is opened with dlopen at run time. Without headers the
# backend is compiled out; without nvcc it is built without kernels.
option(CAI_ENABLE_CUDA "Build the CUDA driver backend when CUDA headers are found" ON)
set(CAI_CUDA_PTX_ARCH "compute_75" CACHE STRING
    "Virtual architecture of the embedded PTX (the lowest one nvcc still accepts)")
# PTX ISA 8.0 is CUDA 12.0's, the oldest driver the loader accepts; ptxas checks at build time
# that the kernels need nothing newer. Empty keeps the ISA nvcc writes (its own CUDA version).
set(CAI_CUDA_PTX_ISA "8.0" CACHE STRING "PTX ISA version the embedded PTX declares")

set(_cai_cuda_headers 0)
set(_cai_cuda_kernels 0)
if(CAI_ENABLE_CUDA)
  find_package(CUDAToolkit QUIET)
  # find_path also covers a headers-only toolkit that FindCUDAToolkit rejects.
  find_path(CAI_CUDA_INCLUDE_DIR cuda.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDA_PATH ENV CUDA_HOME
    PATHS /usr/local/cuda
    PATH_SUFFIXES include)
  find_program(CAI_NVCC_EXECUTABLE nvcc
    HINTS ${CUDAToolkit_BIN_DIR} ENV CUDA_PATH ENV CUDA_HOME
    PATHS /usr/local/cuda
    PATH_SUFFIXES bin)
  if(CAI_NVCC_EXECUTABLE)
    get_filename_component(_cai_nvcc_dir ${CAI_NVCC_EXECUTABLE} DIRECTORY)
    find_program(CAI_PTXAS_EXECUTABLE ptxas HINTS ${_cai_nvcc_dir} NO_DEFAULT_PATH)
  endif()
  if(CAI_CUDA_INCLUDE_DIR)
    set(_cai_cuda_headers 1)
    target_include_directories(cai_device SYSTEM PRIVATE ${CAI_CUDA_INCLUDE_DIR})
  endif()
  if(_cai_cuda_headers AND CAI_NVCC_EXECUTABLE)
    set(_cai_cuda_kernels 1)
  endif()
endif()

if(_cai_cuda_kernels)
  set(_cai_nvcc_ptx ${CMAKE_CURRENT_BINARY_DIR}/cai_kernels.nvcc.ptx)
  set(_cai_ptx ${CMAKE_CURRENT_BINARY_DIR}/cai_kernels.ptx)
  set(_cai_ptx_cpp ${CMAKE_CURRENT_BINARY_DIR}/cai_kernels_ptx.cpp)
  set(_cai_ccbin)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    # The same host compiler as the library, not whatever gcc is first on PATH.
    set(_cai_ccbin -ccbin ${CMAKE_CXX_COMPILER})
  endif()
  set(_cai_ptxas)
  if(CAI_PTXAS_EXECUTABLE AND CAI_CUDA_PTX_ISA)
    string(REPLACE "compute_" "sm_" _cai_sm ${CAI_CUDA_PTX_ARCH})
    set(_cai_ptxas -DPTXAS=${CAI_PTXAS_EXECUTABLE} -DSM=${_cai_sm})
  endif()
  add_custom_command(OUTPUT ${_cai_nvcc_ptx}
    COMMAND ${CAI_NVCC_EXECUTABLE} --ptx -arch=${CAI_CUDA_PTX_ARCH} -O3 -std=c++20
            ${_cai_ccbin} -I${PROJECT_SOURCE_DIR}/src -I${PROJECT_SOURCE_DIR}/include
            -o ${_cai_nvcc_ptx} ${CMAKE_CURRENT_LIST_DIR}/kernels.cu
    # The entries are generated from the tables and wrap the bodies, which run the functors.
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/kernels.cu
            ${PROJECT_SOURCE_DIR}/src/device/kernels/elementwise.h
            ${PROJECT_SOURCE_DIR}/src/device/kernels/launch.h
            ${PROJECT_SOURCE_DIR}/src/device/kernels/bodies.h
            ${PROJECT_SOURCE_DIR}/include/cai/device/operations.h
            ${PROJECT_SOURCE_DIR}/include/cai/core/host_device.h
    COMMENT "nvcc: kernels.cu -> PTX (${CAI_CUDA_PTX_ARCH})"
    VERBATIM)
  add_custom_command(OUTPUT ${_cai_ptx_cpp}
    BYPRODUCTS ${_cai_ptx} ${_cai_ptx}.cubin
    COMMAND ${CMAKE_COMMAND} -DIN=${_cai_nvcc_ptx} -DPTX=${_cai_ptx} -DOUT=${_cai_ptx_cpp}
            -DPTX_ISA=${CAI_CUDA_PTX_ISA} ${_cai_ptxas}
            -P ${CMAKE_CURRENT_LIST_DIR}/embed_ptx.cmake
    DEPENDS ${_cai_nvcc_ptx} ${CMAKE_CURRENT_LIST_DIR}/embed_ptx.cmake
    COMMENT "Embedding the kernels' PTX"
    VERBATIM)
  target_sources(cai_device PRIVATE ${_cai_ptx_cpp})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    # The PTX is one string literal longer than the 64 KiB ISO C++ promises; g++ and clang take it.
    set_source_files_properties(${_cai_ptx_cpp} PROPERTIES COMPILE_OPTIONS -Wno-overlength-strings)
  endif()
endif()

target_compile_definitions(cai_device PRIVATE CAI_HAVE_CUDA_HEADERS=${_cai_cuda_headers}
                                              CAI_HAVE_CUDA_KERNELS=${_cai_cuda_kernels})
if(NOT _cai_cuda_headers)
  message(STATUS "cai: CUDA headers not found; the CUDA backend is compiled out (simulator only)")
elseif(NOT _cai_cuda_kernels)
  message(STATUS "cai: nvcc not found; the CUDA backend is built without kernels")
else()
  message(STATUS "cai: CUDA backend with PTX kernels (${CAI_NVCC_EXECUTABLE}, "
                 "${CAI_CUDA_PTX_ARCH}, PTX ISA ${CAI_CUDA_PTX_ISA})")
endif()
