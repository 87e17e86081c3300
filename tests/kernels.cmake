# Tests of the fused forward kernel (src/forward/) and the SIMD layer (src/simd/): accuracy on every compiled
# SIMD target, threads, the vector exp.
flashattn_add_test(kernel_fused_test kernel_fused_test.cc)
flashattn_add_test(kernel_exp_test kernel_exp_test.cc)
flashattn_add_test(kernel_threads_test kernel_threads_test.cc)
