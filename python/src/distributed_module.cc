// flashattn._distributed: the compiled half of flashattn.distributed's NumPy + mpi4py functions
// (distributed.h). Importing it imports mpi4py.MPI, which initializes MPI.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "distributed.h"
#include "flashattn/distributed.h"

namespace py = pybind11;
namespace fd = flashattn::distributed;

namespace {

py::list LastRingTimings() {
  py::list steps;
  for (const fd::RingStepTiming& t : fd::last_ring_timings()) {
    steps.append(py::dict(py::arg("compute_seconds") = t.compute_seconds,
                          py::arg("transfer_seconds") = t.transfer_seconds,
                          py::arg("wait_seconds") = t.wait_seconds, py::arg("bytes") = t.bytes));
  }
  return steps;
}

}  // namespace

PYBIND11_MODULE(_distributed, m) {
  m.doc() = "flashattn.distributed's compiled bindings; use the functions of flashattn.distributed instead.";
  flashattn::python::ImportMpi4py();
  flashattn::python::RaiseInvalidValuesAs(py::module_::import("flashattn._core").attr("Error"));
  m.def("last_ring_timings", &LastRingTimings, "Per-step timings of this rank's last ring call.");
  flashattn::python::RegisterRing(m);
  flashattn::python::RegisterShardedDecode(m);
}
