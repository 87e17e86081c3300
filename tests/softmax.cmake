# Properties of the softmax family (src/reference/softmax.h): agreement with float64, the (m, d) monoid,
# empty rows, overflow of the naive method.
flashattn_add_test(softmax_test ${CMAKE_CURRENT_LIST_DIR}/softmax_test.cc)
