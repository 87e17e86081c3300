# Installs flashattn into a temporary prefix and builds a downstream project (tests/install: a consumer and
# README.md's example) against it with find_package(flashattn) + flashattn::flashattn.
set(flashattn_consumer_args -DSOURCE_DIR=${PROJECT_SOURCE_DIR} "-DGENERATOR=${CMAKE_GENERATOR}"
    -DCXX=${CMAKE_CXX_COMPILER})

# The library of this build, as it is (static by default).
add_test(NAME install_consumer
         COMMAND ${CMAKE_COMMAND} ${flashattn_consumer_args} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer -DLIBRARY=$<TARGET_FILE_NAME:flashattn>
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install/run_consumer.cmake)
set_tests_properties(install_consumer PROPERTIES TIMEOUT 300)

# The other kind: a shared library, configured and built inside the test (the library target only).
if(NOT BUILD_SHARED_LIBS)
  add_test(NAME install_consumer_shared
           COMMAND ${CMAKE_COMMAND} ${flashattn_consumer_args} -DSHARED=ON
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer_shared
                   -DLIBRARY=libflashattn.so.${PROJECT_VERSION}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/install/run_consumer.cmake)
  # A high cost makes `ctest -j` start it first, so its compile overlaps the other tests.
  set_tests_properties(install_consumer_shared PROPERTIES TIMEOUT 900 COST 10000 FIXTURES_SETUP shared_library)
  set(flashattn_shared_library
      ${CMAKE_CURRENT_BINARY_DIR}/install_consumer_shared/library/libflashattn.so.${PROJECT_VERSION})
else()
  set(flashattn_shared_library $<TARGET_FILE:flashattn>)
endif()

# The shared library's exported symbols: the public API only (tests/install/check_exports.cmake).
add_test(NAME shared_library_exports
         COMMAND ${CMAKE_COMMAND} -DLIBRARY=${flashattn_shared_library} -DNM=${CMAKE_NM}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install/check_exports.cmake)
if(NOT BUILD_SHARED_LIBS)
  set_tests_properties(shared_library_exports PROPERTIES FIXTURES_REQUIRED shared_library)
endif()

# The project configured and generated with a multi-configuration generator (Ninja Multi-Config), nothing built;
# its python/modules.txt must list what this build's lists.
if(TARGET flashattn_python)
  set(flashattn_modules_file ${PROJECT_BINARY_DIR}/python/modules.txt)
endif()
add_test(NAME configure_multi_config
         COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/configure_multi_config "-DMODULES=${flashattn_modules_file}"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install/configure_multi_config.cmake)
set_tests_properties(configure_multi_config PROPERTIES TIMEOUT 300)
