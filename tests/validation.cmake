# The rejected-input table of flashattn::forward (issue 2's validation list), for every algorithm.
flashattn_add_test(validation_test validation_test.cc)
