// flashattn._core: the compiled half of the Python package. Each function takes NumPy arrays, checks them
// (TypeError for element types, Error for shapes and values), fills the library's parameter struct and
// runs the computation with the GIL released. Every argument after the arrays is keyword-only. The public
// modules flashattn/__init__.py and flashattn/torch.py give them flash-attn's and PyTorch's signatures.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/c_api.h"
#include "flashattn/flashattn.h"
#include "modifiers.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "flashattn's compiled bindings; use the functions of the flashattn package instead.";
  m.attr("__version__") = flashattn_version();  // the library's: the CMake project version
  // Every invalid shape or value raises Error, whose message names the argument and its values: a ValueError
  // (Python's type for a wrong value) and a RuntimeError (what flash-attn's checks raise).
  const py::tuple bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError));
  const py::exception<flashattn::Error> error(m, "Error", bases);
  error.attr("__doc__") =
      "An invalid argument (shape, stride or value); the message names it. A ValueError and a RuntimeError.";
  flashattn::python::RaiseInvalidValuesAs(error);
  flashattn::python::RegisterEcho(m);
  flashattn::python::RegisterModifiers(m);
  flashattn::python::RegisterWorkingMemory(m);
  flashattn::python::RegisterForward(m);
  flashattn::python::RegisterBackward(m);
  flashattn::python::RegisterVarlen(m);
  flashattn::python::RegisterKvcache(m);
  flashattn::python::RegisterMerge(m);
  flashattn::python::RegisterIndexer(m);
  flashattn::python::RegisterSdpa(m);
}
