# The tools library's access to the library (tools/support/): conversions on every target, oracle rows.
# (Its IO model is tested in io.cmake, its measurements with the benchmark's in bench.cmake.)
flashattn_add_test(support_test support_test.cc)
target_link_libraries(support_test PRIVATE flashattn_tools)
