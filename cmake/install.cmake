# Installs the library, its header and a CMake config package: find_package(flashattn) then
# target_link_libraries(app flashattn::flashattn). When built, flashattn::mpi is the package's component
# `mpi`: find_package(flashattn COMPONENTS mpi) then target_link_libraries(app flashattn::mpi).
include(CMakePackageConfigHelpers)

install(TARGETS flashattn EXPORT flashattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET flashattn_mpi)
  install(DIRECTORY include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS flashattn_mpi EXPORT flashattnMpiTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT flashattnMpiTargets NAMESPACE flashattn::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
else()
  install(DIRECTORY include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN distributed.h EXCLUDE)
endif()
install(EXPORT flashattnTargets NAMESPACE flashattn::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
configure_package_config_file(cmake/flashattnConfig.cmake.in
        ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
        INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
        COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashattnConfig.cmake ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)

# pkg-config: `pkg-config --cflags --libs flashattn` (add --static for the static library, which needs
# Highway, OpenMP and the C++ runtime). The file locates the prefix from its own directory, so the install
# can be moved or made with `cmake --install --prefix`.
file(RELATIVE_PATH flashattn_pc_prefix_from_pcfiledir /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" flashattn_pc_prefix_from_pcfiledir "${flashattn_pc_prefix_from_pcfiledir}")
configure_file(cmake/flashattn.pc.in ${PROJECT_BINARY_DIR}/flashattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flashattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
