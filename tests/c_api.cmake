# The C structs against the C++ ones: every field through the mapping the entry points use, the defaults and
# the stride helpers (c_api_fields_test.cc).
flashattn_add_test(c_api_fields_test ${CMAKE_CURRENT_LIST_DIR}/c_api_fields_test.cc)

# The C API from C (tests/c_api/run_c_api.cmake): c_api_test.c and README.md's C example, compiled with a C
# compiler against an installed copy with the flags of its flashattn.pc. c_api_static links this build's
# static library (pkg-config --static); c_api_shared links the shared library that install_consumer_shared
# builds (tests/install.cmake) and also calls it through Python's ctypes.
enable_language(C)
set(flashattn_c_api_args -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DCC=${CMAKE_C_COMPILER} -DVERSION=${PROJECT_VERSION})
if(FLASHATTN_PYTHON_EXECUTABLE)
  list(APPEND flashattn_c_api_args -DPYTHON=${FLASHATTN_PYTHON_EXECUTABLE})
endif()

if(BUILD_SHARED_LIBS)
  add_test(NAME c_api_shared
           COMMAND ${CMAKE_COMMAND} ${flashattn_c_api_args} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DLINKAGE=shared
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/c_api_shared -P ${CMAKE_CURRENT_SOURCE_DIR}/c_api/run_c_api.cmake)
else()
  add_test(NAME c_api_static
           COMMAND ${CMAKE_COMMAND} ${flashattn_c_api_args} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DLINKAGE=static
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/c_api_static -P ${CMAKE_CURRENT_SOURCE_DIR}/c_api/run_c_api.cmake)
  add_test(NAME c_api_shared
           COMMAND ${CMAKE_COMMAND} ${flashattn_c_api_args} -DLINKAGE=shared
                   -DBUILD_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_consumer_shared/library
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/c_api_shared -P ${CMAKE_CURRENT_SOURCE_DIR}/c_api/run_c_api.cmake)
  set_tests_properties(c_api_shared PROPERTIES FIXTURES_REQUIRED shared_library)
endif()
set_tests_properties(c_api_shared PROPERTIES TIMEOUT 300)
if(TEST c_api_static)
  set_tests_properties(c_api_static PROPERTIES TIMEOUT 300)
endif()
