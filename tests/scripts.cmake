# The scripts of scripts/ that write docs/performance.md's tables: scripts/perf_table.py on a committed sample
# of `flashattn bench --json` output (tests/perf_table/).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME perf_table_test COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/perf_table/perf_table_test.py)
set_tests_properties(perf_table_test PROPERTIES ENVIRONMENT PYTHONDONTWRITEBYTECODE=1 TIMEOUT 60)
