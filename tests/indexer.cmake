# The lightning indexer: the kernel against the float64 reference, and its validation.
flashattn_add_test(indexer_test ${CMAKE_CURRENT_LIST_DIR}/indexer_test.cc)
flashattn_add_test(indexer_validation_test ${CMAKE_CURRENT_LIST_DIR}/indexer_validation_test.cc)
