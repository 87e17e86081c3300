#include "echo.h"

namespace flashattn::python {
namespace {

// _core._ParametersEcho, made once by RegisterEcho and kept for the life of the process.
PyObject* echo_type = nullptr;

}  // namespace

py::handle EchoType() { return echo_type; }

bool EchoEnabled() { return echo_type != nullptr && py::getattr(echo_type, "enabled").cast<bool>(); }

void RegisterEcho(py::module_& m) {
  echo_type = PyErr_NewExceptionWithDoc(
      "flashattn._core._ParametersEcho",
      "Raised instead of a call into the library while _ParametersEcho.enabled is True (the tests' switch); "
      "args[0] is a dict of every field of the parameter struct the call would pass.",
      PyExc_Exception, nullptr);
  if (echo_type == nullptr) throw py::error_already_set();
  py::setattr(echo_type, "enabled", py::bool_(false));
  m.add_object("_ParametersEcho", py::handle(echo_type));
}

}  // namespace flashattn::python
