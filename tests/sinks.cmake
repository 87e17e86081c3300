# Attention sinks (a logit per query head in every row's softmax): forward, varlen and split-KV decode against
# the float64 oracle on every compiled target; dsinks against finite differences and the oracle.
flashattn_add_test(sinks_forward_test ${CMAKE_CURRENT_LIST_DIR}/sinks_forward_test.cc)
target_link_libraries(sinks_forward_test PRIVATE flashattn_decode_test_support)
flashattn_add_test(sinks_backward_test ${CMAKE_CURRENT_LIST_DIR}/sinks_backward_test.cc)
target_link_libraries(sinks_backward_test PRIVATE flashattn_backward_test_support)
