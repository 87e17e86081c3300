# The command-line program (cli/): the .npy reader/writer, and flashattn run/demo driven as a subprocess.
if(FLASHATTN_ENABLE_CLI)
  flashattn_add_test(npy_test npy_test.cc)
  target_link_libraries(npy_test PRIVATE flashattn_npy)

  flashattn_add_test(cli_test cli_test.cc)
  target_link_libraries(cli_test PRIVATE flashattn_npy)
  target_compile_definitions(cli_test PRIVATE FLASHATTN_CLI_PATH="$<TARGET_FILE:flashattn_cli>")
  if(FLASHATTN_ENABLE_BENCH)  # the program has `flashattn bench` (cli/CMakeLists.txt)
    target_compile_definitions(cli_test PRIVATE FLASHATTN_WITH_BENCH)
  endif()
  add_dependencies(cli_test flashattn_cli)
endif()
