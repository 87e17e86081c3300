// flashattn._core: the compiled half of the Python package. Each function takes NumPy arrays, checks them
// (TypeError for element types, ValueError for shapes and values), fills the library's parameter struct and
// runs the computation with the GIL released. Every argument after the arrays is keyword-only. The public
// modules flashattn/__init__.py and flashattn/torch.py give them flash-attn's and PyTorch's signatures.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "flashattn/c_api.h"
#include "flashattn/flashattn.h"
#include "modifiers.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "flashattn's compiled bindings; use the functions of the flashattn package instead.";
  m.attr("__version__") = flashattn_version();  // the library's: the CMake project version
  // Every invalid call is a flashattn::Error whose message names the argument and its values.
  py::register_exception<flashattn::Error>(m, "Error", PyExc_ValueError);
  flashattn::python::RegisterModifiers(m);
  flashattn::python::RegisterForward(m);
  flashattn::python::RegisterBackward(m);
  flashattn::python::RegisterVarlen(m);
  flashattn::python::RegisterKvcache(m);
  flashattn::python::RegisterMerge(m);
  flashattn::python::RegisterSdpa(m);
}
