# The folder layering of docs/architecture.md: every #include against its table fails architecture_test;
# architecture_self_test checks that the checker catches a wrong include, a cycle, a folder without a row.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME architecture_test
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/architecture_test.py ${PROJECT_SOURCE_DIR})
add_test(NAME architecture_self_test
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/architecture_test.py --self-test)
