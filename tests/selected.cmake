# Attention over selected keys (key_indices): forward and decode over every cache type against the float64
# oracle on every compiled target, and the refused lists and combinations.
flashattn_add_test(selected_keys_test ${CMAKE_CURRENT_LIST_DIR}/selected_keys_test.cc)
