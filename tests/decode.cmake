# Flash-Decoding (issue 4): the LSE merge, decode over contiguous and paged KV caches, rotary, varlen.
flashattn_add_test(merge_test ${CMAKE_CURRENT_LIST_DIR}/merge_test.cc)
