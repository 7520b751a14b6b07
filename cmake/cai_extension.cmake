# cai_add_extension(<name> SOURCES <files>... [CUDA])
#
# Builds the Python extension module <name> with nanobind (NB_STATIC), on the cai::nanobind
# headers. The module links no cai library: at run time it uses the `cai` package's runtime
# through its C API (docs/cpp.md). Python and nanobind are found through Python_EXECUTABLE
# (give it on the command line; a relative path is taken from the directory cmake runs in).
#
# With CUDA, where nvcc is found, the SOURCES are compiled by nvcc, so that cai::nb::for_each
# has its GPU kernel; without nvcc they are compiled by the C++ compiler and for_each runs on
# cai's simulator only. CMAKE_CUDA_ARCHITECTURES defaults to "75;90". The module is compiled
# for speed rather than size (nanobind's NOMINSIZE): the argument conversion of cai::nb::array
# runs on every call.
#
# A macro, because enable_language(CUDA) must run at directory scope: call it at the top
# level of a CMakeLists.txt, not from inside a function.
macro(cai_add_extension name)
  cmake_parse_arguments(_cai_ext "CUDA" "" "SOURCES" ${ARGN})
  get_property(_cai_ext_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(_cai_ext_CUDA AND NOT CUDA IN_LIST _cai_ext_languages)
    include(CheckLanguage)
    check_language(CUDA)  # sets the cached CMAKE_CUDA_COMPILER where nvcc works
    if(CMAKE_CUDA_COMPILER)
      if(NOT CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES "75;90")
      endif()
      if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)  # CMake < 3.26 does not know nvcc's C++20
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      endif()
      enable_language(CUDA)
    endif()
  endif()
  if(NOT nanobind_FOUND)
    _cai_find_nanobind()  # here, not in the function: nanobind's variables must outlive it
  endif()
  _cai_add_extension(${name} ${ARGN})
endmacro()

macro(_cai_find_nanobind)
  if(Python_EXECUTABLE)
    # Typed as a file path: a relative path given with -D becomes absolute (cmake's cwd).
    set(Python_EXECUTABLE "${Python_EXECUTABLE}" CACHE FILEPATH "Python interpreter")
  endif()
  if(NOT TARGET Python::Module)
    find_package(Python 3.10 COMPONENTS Interpreter Development.Module REQUIRED)
  endif()
  if(NOT nanobind_DIR)
    execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE OUTPUT_VARIABLE _nb_dir
                    RESULT_VARIABLE _nb_rc)
    if(NOT _nb_rc EQUAL 0)
      message(FATAL_ERROR "cai_add_extension: ${Python_EXECUTABLE} -m nanobind failed; "
                          "pip install nanobind into that interpreter")
    endif()
    set(nanobind_DIR "${_nb_dir}" CACHE PATH "nanobind's CMake package")
  endif()
  find_package(nanobind CONFIG REQUIRED)
endmacro()

function(_cai_add_extension name)
  cmake_parse_arguments(ARG "CUDA" "" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "cai_add_extension(${name}): no SOURCES")
  endif()
  if(ARG_CUDA AND CMAKE_CUDA_COMPILER)
    # nanobind's flags for its own targets are the host compiler's (nvcc refuses them), so
    # the nvcc-compiled sources are an object library with only the include paths.
    nanobind_add_module(${name} NB_STATIC NOMINSIZE PROTECT_STACK)
    set(_objects ${name}_cuda_objects)
    add_library(${_objects} OBJECT ${ARG_SOURCES})
    set_source_files_properties(${ARG_SOURCES} PROPERTIES LANGUAGE CUDA)
    get_target_property(_nb_libs ${name} LINK_LIBRARIES)
    list(FILTER _nb_libs INCLUDE REGEX "^nanobind")
    target_include_directories(${_objects} PRIVATE
      $<TARGET_PROPERTY:${_nb_libs},INTERFACE_INCLUDE_DIRECTORIES>)
    target_compile_definitions(${_objects} PRIVATE
      $<TARGET_PROPERTY:${_nb_libs},INTERFACE_COMPILE_DEFINITIONS>)
    target_link_libraries(${_objects} PRIVATE cai::nanobind)
    set_target_properties(${_objects} PROPERTIES
      POSITION_INDEPENDENT_CODE ON CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
      CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
    target_compile_options(${_objects} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda>)
    find_package(CUDAToolkit REQUIRED)
    target_link_libraries(${name} PRIVATE ${_objects} CUDA::cudart_static)
    message(STATUS "cai_add_extension(${name}): kernels by ${CMAKE_CUDA_COMPILER}")
  else()
    nanobind_add_module(${name} NB_STATIC NOMINSIZE ${ARG_SOURCES})
    if(ARG_CUDA)
      message(STATUS "cai_add_extension(${name}): no nvcc, so for_each runs on the simulator only")
    endif()
  endif()
  target_link_libraries(${name} PRIVATE cai::nanobind)
  target_compile_features(${name} PRIVATE cxx_std_20)
endfunction()
