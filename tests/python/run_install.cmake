# The Python package as a user installs it (docs/python.md): `cmake --install <build> --component python`,
# staged under DESTDIR in a scratch directory instead of the interpreter's site-packages (which needs root),
# then imported from there by a clean interpreter (check_install.py): isolated mode, so no PYTHONPATH, no
# user site-packages and nothing of the build tree on sys.path. Run as a script:
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DPYTHON=... -DINSTALL_DIR=<FLASHATTN_PYTHON_INSTALL_DIR>
#         -DPREFIX=<CMAKE_INSTALL_PREFIX> -DCHECK=<check_install.py> -P run_install.cmake
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/../install/script_helpers.cmake)  # run()

foreach(var BUILD_DIR WORK_DIR PYTHON INSTALL_DIR PREFIX CHECK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_install.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(root ${WORK_DIR}/root)
run(${CMAKE_COMMAND} -E env DESTDIR=${root} ${CMAKE_COMMAND} --install ${BUILD_DIR} --component python)
message(STATUS "${output}")

# Where the package must have landed: INSTALL_DIR (absolute unless configured otherwise) under DESTDIR.
if(IS_ABSOLUTE ${INSTALL_DIR})
  set(site ${root}${INSTALL_DIR})
else()
  set(site ${root}${PREFIX}/${INSTALL_DIR})
endif()
file(GLOB_RECURSE installed RELATIVE ${root} ${root}/*)
file(GLOB package RELATIVE ${site}/flashattn ${site}/flashattn/*)
# flashattn.distributed and its compiled module (built with MPI and mpi4py), checked on their own below.
file(GLOB_RECURSE distributed RELATIVE ${site}/flashattn ${site}/flashattn/distributed/* ${site}/flashattn/_distributed*)
list(FILTER package EXCLUDE REGEX "^_?distributed")
list(FILTER installed EXCLUDE REGEX "/flashattn/_?distributed")
list(SORT package)
# The public modules, their private helper modules and the compiled module, whatever its tag
# (_core.cpython-311-x86_64-linux-gnu.so), listed as _core.so.
list(TRANSFORM package REPLACE "^_core[^;]*\\.so$" "_core.so")
set(expected __init__.py _arguments.py _autograd.py _block_mask.py _core.so _kvcache.py _tensors.py torch.py)
if(NOT package STREQUAL expected)
  message(FATAL_ERROR "expected ${expected} in ${site}/flashattn, got: ${package}\n"
                      "everything installed under ${root}: ${installed}")
endif()
list(LENGTH installed count)
list(LENGTH expected expected_count)
if(NOT count EQUAL expected_count)
  message(FATAL_ERROR "the python component installed more than the package: ${installed}")
endif()

if(distributed)
  list(TRANSFORM distributed REPLACE "^_distributed[^;]*\\.so$" "_distributed.so")
  list(SORT distributed)
  set(expected _distributed.so distributed/__init__.py distributed/_agreement.py distributed/_arguments.py
               distributed/_layout.py distributed/_mpi.py distributed/_torch_call.py distributed/_torch_decode.py
               distributed/_torch_ring.py
               distributed/torch.py)
  if(NOT distributed STREQUAL expected)
    message(FATAL_ERROR "expected ${expected} for flashattn.distributed, got: ${distributed}")
  endif()
endif()

run(${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONHOME --unset=PYTHONSTARTUP OMP_NUM_THREADS=1
    ${PYTHON} -I ${CHECK} ${site} ${BUILD_DIR})
message(STATUS "${output}")
