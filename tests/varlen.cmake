# Variable-length batches (src/varlen/): forward_varlen against the oracle of each sequence; backward_varlen,
# and dropout in both, whose stream is that of each sequence's batch-1 problem at dropout_offset + b.
flashattn_add_test(varlen_forward_test varlen_forward_test.cc)
flashattn_add_test(backward_varlen_test backward_varlen_test.cc)
