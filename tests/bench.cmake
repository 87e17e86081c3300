# The benchmark program's checkable logic (bench/): FLOP counts, option handling, JSON and table output, the
# median loop, the peak-RSS probe, the FMA chains, and that the OpenBLAS baseline computes the same attention
# as the float64 oracle. No timings are asserted.
if(TARGET flashattn_bench)
  flashattn_add_test(bench_case_test bench_case_test.cc)
  target_link_libraries(bench_case_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_report_test bench_report_test.cc)
  target_link_libraries(bench_report_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_measure_test bench_measure_test.cc)
  target_link_libraries(bench_measure_test PRIVATE flashattn_bench)

  flashattn_add_test(bench_baseline_test bench_baseline_test.cc)
  target_link_libraries(bench_baseline_test PRIVATE flashattn_bench)
endif()
