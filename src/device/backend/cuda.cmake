# The kernels' PTX. The backend itself is plain C++ (it declares the driver ABI it calls in
# src/device/driver/abi.h and opens libcuda.so.1 at run time), so it is always built; nvcc runs
# for one step only, compiling kernels.cu to PTX that is embedded in the library. Without
# nvcc the library embeds a manifest of the kernels' names instead: the simulated driver runs
# them, a real driver cannot (fill, add and strided copies then say so).
option(CAI_ENABLE_CUDA "Compile the kernels to PTX when nvcc is found" ON)
set(CAI_CUDA_PTX_ARCH "compute_75" CACHE STRING
    "Virtual architecture of the embedded PTX (the lowest one nvcc still accepts)")
# PTX ISA 8.0 is CUDA 12.0's, the oldest driver the loader accepts; ptxas checks at build time
# that the kernels need nothing newer. Empty keeps the ISA nvcc writes (its own CUDA version).
set(CAI_CUDA_PTX_ISA "8.0" CACHE STRING "PTX ISA version the embedded PTX declares")

set(_cai_cuda_kernels 0)
if(CAI_ENABLE_CUDA)
  find_package(CUDAToolkit QUIET)
  find_program(CAI_NVCC_EXECUTABLE nvcc
    HINTS ${CUDAToolkit_BIN_DIR} ENV CUDA_PATH ENV CUDA_HOME
    PATHS /usr/local/cuda
    PATH_SUFFIXES bin)
  if(CAI_NVCC_EXECUTABLE)
    set(_cai_cuda_kernels 1)
    get_filename_component(_cai_nvcc_dir ${CAI_NVCC_EXECUTABLE} DIRECTORY)
    find_program(CAI_PTXAS_EXECUTABLE ptxas HINTS ${_cai_nvcc_dir} NO_DEFAULT_PATH)
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
            ${_cai_ccbin} -I${PROJECT_SOURCE_DIR}/src/device -I${PROJECT_SOURCE_DIR}/include
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

target_compile_definitions(cai_device PRIVATE CAI_HAVE_CUDA_KERNELS=${_cai_cuda_kernels}
                                              CAI_CUDA_PTX_ISA="${CAI_CUDA_PTX_ISA}")
if(NOT _cai_cuda_kernels)
  message(STATUS "cai: nvcc not found; the kernels exist only for the simulated driver "
                 "(fill, add and strided copies cannot run on a GPU)")
else()
  message(STATUS "cai: kernels compiled to PTX (${CAI_NVCC_EXECUTABLE}, "
                 "${CAI_CUDA_PTX_ARCH}, PTX ISA ${CAI_CUDA_PTX_ISA})")
endif()
