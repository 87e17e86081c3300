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
  set_tests_properties(install_consumer_shared PROPERTIES TIMEOUT 900 COST 10000)
  # Its shared library is reused by c_api_shared (tests/c_api.cmake).
  set_tests_properties(install_consumer_shared PROPERTIES FIXTURES_SETUP flashattn_shared_library)
endif()
