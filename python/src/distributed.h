// flashattn._distributed: flashattn::mpi for the Python package. An mpi4py communicator becomes an MPI_Comm
// through mpi4py's C API. Each call is split in two so that no rank can leave a collective call on its own:
// a prepared call checks this rank's arrays and allocates its outputs (raising TypeError or ValueError
// locally), flashattn/distributed/__init__.py then lets every rank learn whether all ranks prepared their
// calls, and only then does each rank run its call (the library's collective, with the GIL released).
#ifndef FLASHATTN_PYTHON_DISTRIBUTED_H_
#define FLASHATTN_PYTHON_DISTRIBUTED_H_

#include <mpi.h>
#include <pybind11/pybind11.h>

namespace flashattn::python {

namespace py = pybind11;

// Imports mpi4py.MPI (which initializes MPI) and its C API; throws error_already_set if that fails.
void ImportMpi4py();
// The MPI_Comm of an mpi4py.MPI.Intracomm; TypeError naming `comm` for anything else (a null communicator,
// an intercommunicator).
MPI_Comm CommFromPython(const py::handle& comm);

void RegisterRing(py::module_& m);           // distributed_ring.cc: ring forward and backward
void RegisterShardedDecode(py::module_& m);  // distributed_decode.cc: decoding over a sharded KV cache

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_DISTRIBUTED_H_
