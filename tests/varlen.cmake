# Variable-length batches of the backward pass (backward_varlen); the forward's are in decode.cmake.
flashattn_add_test(backward_varlen_test backward_varlen_test.cc)
