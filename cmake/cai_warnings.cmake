# Warnings for the project's own targets only.
function(cai_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                             -Wno-sign-conversion)
  endif()
endfunction()

# Declares one layer library: cai_add_layer(NAME SOURCES... DEPENDS layers...)
function(cai_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS" ${ARGN})
  add_library(cai_${name} STATIC ${ARG_SOURCES})
  add_library(cai::${name} ALIAS cai_${name})
  target_include_directories(cai_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CAI_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_features(cai_${name} PUBLIC cxx_std_20)
  if(ARG_DEPENDS)
    target_link_libraries(cai_${name} PUBLIC ${ARG_DEPENDS})
  endif()
  set_target_properties(cai_${name} PROPERTIES EXPORT_NAME ${name})
  cai_set_warnings(cai_${name})
endfunction()
