# The IO model (tools/io_model/) against the instrumented reference run.
flashattn_add_test(io_model_test io_model_test.cc)
target_link_libraries(io_model_test PRIVATE flashattn_tools)

# `flashattn io` driven as a subprocess: both numbers agree, nonsense arguments are rejected.
if(FLASHATTN_ENABLE_CLI)
  flashattn_add_test(io_cli_test io_cli_test.cc)
  target_compile_definitions(io_cli_test PRIVATE FLASHATTN_CLI_PATH="$<TARGET_FILE:flashattn_cli>")
  add_dependencies(io_cli_test flashattn_cli)
endif()
