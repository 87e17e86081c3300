# Flash-Decoding: the LSE merge, decode over contiguous and paged KV caches, rotary.
flashattn_add_test(merge_test ${CMAKE_CURRENT_LIST_DIR}/merge_test.cc)
add_library(flashattn_decode_test_support STATIC ${CMAKE_CURRENT_LIST_DIR}/decode_test_case.cc)
target_link_libraries(flashattn_decode_test_support PUBLIC flashattn_test_support)
flashattn_add_test(decode_test ${CMAKE_CURRENT_LIST_DIR}/decode_test.cc)
target_link_libraries(decode_test PRIVATE flashattn_decode_test_support)
flashattn_add_test(decode_validation_test ${CMAKE_CURRENT_LIST_DIR}/decode_validation_test.cc)
target_link_libraries(decode_validation_test PRIVATE flashattn_decode_test_support)
flashattn_add_test(decode_quantized_test ${CMAKE_CURRENT_LIST_DIR}/decode_quantized_test.cc)
