# The validation matrix: the rejected-input tables of every entry point. Each table takes well under a
# second, so each file is one CTest test. Non-finite inputs and concurrent callers are tested here.
flashattn_add_test(validation_test validation_test.cc)
foreach(name validation_matrix_decode_test validation_matrix_merge_varlen_test validation_matrix_backward_test
             nonfinite_test concurrency_test)
  flashattn_add_test(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cc)
endforeach()
# The non-finite tests use decode's random cases (tests/decode.cmake) and the backward problems.
target_link_libraries(nonfinite_test PRIVATE flashattn_decode_test_support flashattn_backward_test_support)
# The concurrency test calls from std::threads and from inside its own OpenMP parallel region. OpenMP's flag
# makes its units unfit for the shared precompiled header (clang 14 crashed on a header compiled without it).
target_link_libraries(concurrency_test PRIVATE flashattn_decode_test_support flashattn_backward_test_support
                                               OpenMP::OpenMP_CXX)
set_target_properties(concurrency_test PROPERTIES DISABLE_PRECOMPILE_HEADERS ON)
