# cmake -DIN=nvcc.ptx -DPTX=out.ptx -DOUT=out.cpp [-DPTX_ISA=8.0 -DPTXAS=ptxas -DSM=sm_75]
#       -P embed_ptx.cmake
# Lowers the PTX's `.version` to PTX_ISA when nvcc wrote a newer one (a driver JIT-compiles
# PTX only up to the ISA of its own CUDA version), lets ptxas confirm that the code needs
# nothing newer, then wraps it in a raw string literal defining
# cai::device::detail::cuda_kernels_ptx().
file(READ ${IN} _ptx)
if(PTX_ISA)
  string(REGEX MATCH "\n\\.version ([0-9]+\\.[0-9]+)" _line "${_ptx}")
  if(NOT _line)
    message(FATAL_ERROR "embed_ptx.cmake: no .version directive in ${IN}")
  endif()
  if(CMAKE_MATCH_1 VERSION_GREATER PTX_ISA)
    string(REPLACE "${_line}" "\n.version ${PTX_ISA}" _ptx "${_ptx}")
  endif()
endif()
file(WRITE ${PTX} "${_ptx}")
if(PTXAS)
  execute_process(COMMAND ${PTXAS} -arch=${SM} ${PTX} -o ${PTX}.cubin
                  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "embed_ptx.cmake: ptxas rejects the kernels' PTX as ISA ${PTX_ISA} "
                        "(set CAI_CUDA_PTX_ISA to a newer version, or empty to keep nvcc's):\n${_err}")
  endif()
endif()
string(FIND "${_ptx}" ")cai_ptx\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "embed_ptx.cmake: the PTX contains the raw-string delimiter")
endif()
file(WRITE ${OUT} "// Generated from kernels.cu by embed_ptx.cmake; do not edit.
#include <string_view>

namespace cai::device::detail {

std::string_view cuda_kernels_ptx() {
  // NUL-terminated, as cuModuleLoadData requires.
  static constexpr char kPtx[] = R\"cai_ptx(${_ptx})cai_ptx\";
  return {kPtx, sizeof(kPtx) - 1};
}

}  // namespace cai::device::detail
")
