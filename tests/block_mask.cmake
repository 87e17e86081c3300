# Block-sparse attention: block masks and document ids in the forward and backward passes against the same
# calls with the visible elements as a dense boolean mask and the float64 oracle, create_block_mask, and the
# rejected inputs.
flashattn_add_test(block_mask_test ${CMAKE_CURRENT_LIST_DIR}/block_mask_test.cc)
target_link_libraries(block_mask_test PRIVATE flashattn_backward_test_support)
# Block masks and document ids in decode against the float64 oracle over the keys each row sees, and the
# rejected inputs.
flashattn_add_test(decode_block_mask_test ${CMAKE_CURRENT_LIST_DIR}/decode_block_mask_test.cc)
