// The echo of the parameters, a switch of _core for the tests that hold each keyword of the Python functions
// to the C++ field it sets (tests/python/keyword_fields.py). While _core._ParametersEcho.enabled is True,
// each function raises _core._ParametersEcho instead of calling the library, its argument a dict of every
// field of the parameter struct the call would pass: for_each_field's names (include/flashattn/fields.h),
// a pointer as ("address", its address as an int), an enum by its name, an unset optional as None.
#ifndef FLASHATTN_PYTHON_ECHO_H_
#define FLASHATTN_PYTHON_ECHO_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "flashattn/fields.h"
#include "flashattn/flashattn.h"

namespace flashattn::python {

namespace py = pybind11;

void RegisterEcho(py::module_& m);

// The exception type, and whether it is enabled.
py::handle EchoType();
bool EchoEnabled();

inline py::object EchoValue(bool v) { return py::bool_(v); }
template <typename T>
  requires std::is_arithmetic_v<T>
py::object EchoValue(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return py::float_(v);
  } else {
    return py::int_(v);
  }
}
template <typename T>
py::object EchoValue(T* pointer) {
  return py::make_tuple("address", reinterpret_cast<std::uintptr_t>(pointer));
}
inline py::object EchoValue(DType v) { return py::str(std::string(to_string(v))); }
inline py::object EchoValue(CacheElement v) { return py::str(std::string(to_string(v))); }
inline py::object EchoValue(ScaleGranularity v) { return py::str(std::string(to_string(v))); }
inline py::object EchoValue(MaskKind v) {
  return py::str(v == MaskKind::kNone ? "none" : v == MaskKind::kBool ? "bool" : "additive");
}
template <typename T>
py::object EchoValue(const std::optional<T>& v) {
  return v ? EchoValue(*v) : py::object(py::none());
}

// Raises the echo of `params` when it is enabled; returns otherwise. Called with the GIL held, just before
// the library is.
template <typename Params>
void EchoIfEnabled(const Params& params) {
  if (!EchoEnabled()) return;
  py::dict fields;
  for_each_field(params, [&](const std::string& name, const auto& field) {
    fields[py::str(name)] = EchoValue(field);
  });
  PyErr_SetObject(EchoType().ptr(), fields.ptr());
  throw py::error_already_set();
}

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_ECHO_H_
