// mpi4py's C API, in this file only: its header defines static function pointers that import_mpi4py()
// fills for the translation unit that includes it.
#include <mpi4py/mpi4py.h>

#include <string>

#include "distributed.h"

namespace flashattn::python {

void ImportMpi4py() {
  if (import_mpi4py() < 0) throw py::error_already_set();
}

MPI_Comm CommFromPython(const py::handle& comm) {
  MPI_Comm* handle = PyMPIComm_Get(comm.ptr());
  if (handle == nullptr) {
    PyErr_Clear();
    throw py::type_error("comm must be an mpi4py.MPI.Comm, got " +
                         std::string(py::str(comm.get_type().attr("__name__"))));
  }
  if (*handle == MPI_COMM_NULL) throw py::type_error("comm is MPI.COMM_NULL; pass a communicator");
  int inter = 0;
  MPI_Comm_test_inter(*handle, &inter);
  if (inter) throw py::type_error("comm must be an intracommunicator, got an mpi4py.MPI.Intercomm");
  return *handle;
}

}  // namespace flashattn::python
