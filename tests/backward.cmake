# The backward pass: dropout generator, reference gradients against finite differences, the fused
# kernel against the float64 oracle on every compiled target, determinism, rejected inputs.
add_library(flashattn_backward_test_support STATIC ${CMAKE_CURRENT_LIST_DIR}/backward_test_problem.cc)
target_link_libraries(flashattn_backward_test_support PUBLIC flashattn_test_support)
foreach(name backward_dropout_test backward_reference_test backward_kernel_test backward_validation_test)
  flashattn_add_test(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cc)
  target_link_libraries(${name} PRIVATE flashattn_backward_test_support)
endforeach()
# A call as one block of a larger problem (block_position, decode's keys_after): forward, backward, dropout
# and decode of the blocks against the whole problem's call.
flashattn_add_test(block_position_test ${CMAKE_CURRENT_LIST_DIR}/block_position_test.cc)
