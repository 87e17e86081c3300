# The Python package's tests: pytest over tests/python/ with the build tree's package on the path.
# Two CTest tests, so that `ctest -j2` runs the NumPy and the PyTorch halves side by side; each uses one
# thread per call. The torch half fails where python3-torch is missing (scripts/install-deps.sh installs it).
if(FLASHATTN_BUILD_PYTHON)
  foreach(part numpy torch)
    add_test(NAME python_${part}_test
             COMMAND ${FLASHATTN_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider -m ${part}
                     ${CMAKE_CURRENT_SOURCE_DIR}/python)
    set_tests_properties(python_${part}_test PROPERTIES
      ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1"
      LABELS python TIMEOUT 600)
  endforeach()

  # The install docs/python.md describes (`cmake --install --component python`), staged under DESTDIR in
  # the build tree and imported from there by an isolated /usr/bin/python3: tests/python/run_install.cmake.
  add_test(NAME python_install_test
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/python_install
                   -DPYTHON=${FLASHATTN_PYTHON_EXECUTABLE} -DINSTALL_DIR=${FLASHATTN_PYTHON_INSTALL_DIR}
                   -DPREFIX=${CMAKE_INSTALL_PREFIX}
                   -DCHECK=${CMAKE_CURRENT_SOURCE_DIR}/python/check_install.py
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/python/run_install.cmake)
  set_tests_properties(python_install_test PROPERTIES LABELS python TIMEOUT 300)
endif()

# flashattn.distributed (docs/python.md, "Distributed"): pytest over tests/python/distributed/ under mpirun
# with W = 1, 2, 3, 4 ranks, every rank running every test: the NumPy + mpi4py functions and the
# torch.distributed ring (a gloo group over the same ranks, on 127.0.0.1). Open MPI refuses to start as root
# unless OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are set: the tests set both.
if(TARGET flashattn_distributed_python)
  foreach(world 1 2 3 4)
    add_test(NAME python_distributed_w${world}
             COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${world}
                     ${FLASHATTN_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider --color=no
                     ${CMAKE_CURRENT_SOURCE_DIR}/python/distributed)
    set_tests_properties(python_distributed_w${world} PROPERTIES
      ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
      LABELS "python;mpi" TIMEOUT 300 PROCESSORS ${world})
  endforeach()
endif()
