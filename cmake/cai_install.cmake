# Installs the headers, the static libraries and the CMake package (cai-config.cmake with
# cai_add_extension()). The Python build installs them inside the `cai` package, where
# `python -m cai --cmake-dir` finds them (CAI_INSTALL_*DIR, set in the top CMakeLists.txt).
include(CMakePackageConfigHelpers)

install(DIRECTORY include/cai DESTINATION ${CAI_INSTALL_INCLUDEDIR})
install(TARGETS cai cai_nanobind cai_core cai_platform cai_device cai_sync cai_arrays EXPORT cai-targets
        ARCHIVE DESTINATION ${CAI_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CAI_INSTALL_LIBDIR})
if(TARGET cai_sim_driver)
  # The simulated driver, alone in its folder (LD_LIBRARY_PATH=<folder> brings only it).
  install(TARGETS cai_sim_driver EXPORT cai-targets LIBRARY DESTINATION ${CAI_INSTALL_SIMDIR})
endif()
install(EXPORT cai-targets NAMESPACE cai:: DESTINATION ${CAI_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/cai-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cai-config.cmake
  INSTALL_DESTINATION ${CAI_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cai-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cai-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cai-config-version.cmake
              cmake/cai_extension.cmake
        DESTINATION ${CAI_INSTALL_CMAKEDIR})
