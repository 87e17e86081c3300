# The rejected-input table of flashattn::forward (issue 2's validation list), for every algorithm. Its ~300
# cases take well under a second together, so it is one CTest test rather than one process per case.
add_executable(validation_test validation_test.cc)
target_link_libraries(validation_test PRIVATE flashattn_test_support)
add_test(NAME validation_test COMMAND validation_test)
