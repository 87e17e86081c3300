# Installs the library, its header and a CMake config package: find_package(flashattn) then
# target_link_libraries(app flashattn::flashattn).
include(CMakePackageConfigHelpers)

install(TARGETS flashattn EXPORT flashattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashattnTargets NAMESPACE flashattn::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
configure_package_config_file(cmake/flashattnConfig.cmake.in
        ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
        INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
        COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashattnConfig.cmake ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
