include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/cai DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS cai cai_python cai_core cai_device cai_sync cai_arrays EXPORT cai-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT cai-targets NAMESPACE cai:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cai)
configure_package_config_file(cmake/cai-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cai-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cai)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cai-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cai-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cai-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cai)
