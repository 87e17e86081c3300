# Multi-head latent attention shapes (d = 576, dv = 512, and 575/513): forward and backward on every compiled
# target, decode with V inside the K cache, and the head-dimension limit.
flashattn_add_test(mla_test ${CMAKE_CURRENT_LIST_DIR}/mla_test.cc)
target_link_libraries(mla_test PRIVATE flashattn_backward_test_support)
