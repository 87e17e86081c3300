# The Python package installed with pip and as a wheel into fresh venvs from a clean copy of the source,
# the Python tests run against the installed copy, then uninstalled (tests/package/pip_install_test.py).
# It builds the library and the module once more (in the copy), so it runs only where the module is built.
if(TARGET flashattn_python)
  add_test(NAME python_pip_install_test
           COMMAND ${FLASHATTN_PYTHON_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/package/pip_install_test.py
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/python_pip_install ${PROJECT_VERSION})
  # A high cost makes `ctest -j` start it early, so that its build overlaps the other tests.
  set_tests_properties(python_pip_install_test PROPERTIES LABELS python TIMEOUT 1200 COST 9000)
  if(TARGET flashattn_distributed_python)  # built from the copy too: MPI and mpi4py are there
    set_tests_properties(python_pip_install_test PROPERTIES ENVIRONMENT FLASHATTN_EXPECT_DISTRIBUTED=1)
  endif()
endif()
