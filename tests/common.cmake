# The shared pieces of src/common/ that have no kernel of their own: the CPU cache detection.
flashattn_add_test(cpu_caches_test ${CMAKE_CURRENT_LIST_DIR}/cpu_caches_test.cc)
