# The benchmark program's checkable logic (bench/): FLOP and byte counts, drawn cache lengths, the roofline,
# option handling and presets, JSON and table output with the rounds' summaries, the median loop, the
# peak-RSS probe, the FMA and int8 dot-product chains (the latter on every target) and bandwidth kernels, and
# that the OpenBLAS baselines (forward, decode, backward) compute what the library computes. No timings are
# asserted.
if(FLASHATTN_ENABLE_BENCH)
  flashattn_add_test(bench_case_test bench_case_test.cc)
  target_link_libraries(bench_case_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_report_test bench_report_test.cc)
  target_link_libraries(bench_report_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_measure_test bench_measure_test.cc)
  target_link_libraries(bench_measure_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_baseline_test bench_baseline_test.cc)
  target_link_libraries(bench_baseline_test PRIVATE flashattn_bench)

  # The decode and backward baselines against the library (and its backward test problems, tests/backward.cmake).
  flashattn_add_test(bench_modes_test bench_modes_test.cc)
  target_link_libraries(bench_modes_test PRIVATE flashattn_bench flashattn_backward_test_support)
endif()
