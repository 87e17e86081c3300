#include "arrays.h"

#include <algorithm>
#include <exception>
#include <sstream>

namespace flashattn::python {

std::string ShapeString(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << (shape.size() == 1 ? ",)" : ")");
  return out.str();
}

std::string Tensor::ShapeString() const { return python::ShapeString(shape); }

namespace {

PyObject* invalid_value_error = nullptr;  // flashattn._core.Error, alive as long as the interpreter

void TranslateInvalidValue(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const Error& e) {
    PyErr_SetString(invalid_value_error, e.what());
  } catch (const py::value_error& e) {
    PyErr_SetString(invalid_value_error, e.what());
  }
}

}  // namespace

void RaiseInvalidValuesAs(const py::handle& error) {
  invalid_value_error = error.inc_ref().ptr();
  py::register_local_exception_translator(TranslateInvalidValue);
}

namespace {

py::array AsArray(const py::handle& object, const std::string& name) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error(name + " must be a numpy.ndarray, got " +
                         std::string(py::str(object.get_type().attr("__name__"))));
  }
  return py::reinterpret_borrow<py::array>(object);
}

// dtype equality in NumPy's sense (native byte order only: '>f4' differs from 'float32').
bool IsDType(const py::array& array, const char* dtype) { return array.dtype().equal(py::dtype(dtype)); }

}  // namespace

DType ElementType(const py::handle& object, const std::string& name, bool bf16) {
  const py::array array = AsArray(object, name);
  if (bf16 && (IsDType(array, "int16") || IsDType(array, "uint16"))) return DType::kBF16;
  if (IsDType(array, "float32")) return DType::kF32;
  if (IsDType(array, "float16")) return DType::kF16;
  throw py::type_error(name + " must have dtype float32 or float16" + (bf16 ? " (or bfloat16)" : "") +
                       ", got " + std::string(py::str(array.dtype())));
}

Tensor AttentionTensor(const py::handle& object, const std::string& name, int ndim, const char* layout,
                       bool bf16) {
  Tensor t;
  t.name = name;
  t.array = AsArray(object, name);
  t.dtype = ElementType(object, name, bf16);
  if (t.array.ndim() != ndim) {
    throw py::value_error(name + " must have " + std::to_string(ndim) + " dimensions " + layout + ", got " +
                          std::to_string(t.array.ndim()));
  }
  const auto itemsize = static_cast<std::int64_t>(t.array.itemsize());
  for (int i = 0; i < ndim; ++i) {
    t.shape.push_back(t.array.shape(i));
    const std::int64_t bytes = t.array.strides(i);
    if (bytes % itemsize != 0) {
      throw py::value_error(name + " stride of dimension " + std::to_string(i) + " is " +
                            std::to_string(bytes) + " bytes, not a multiple of the element size " +
                            std::to_string(itemsize));
    }
    t.strides.push_back(bytes / itemsize);
  }
  if (t.shape.back() > 1 && t.strides.back() != 1) {
    throw py::value_error(name + " must have a contiguous last dimension (stride 1), got stride " +
                          std::to_string(t.strides.back()) + " elements; pass numpy.ascontiguousarray(" +
                          name + ")");
  }
  return t;
}

void CheckSameDType(const Tensor& first, const Tensor& other) {
  if (first.dtype != other.dtype) {
    throw py::type_error(other.name + " has dtype " + std::string(py::str(other.array.dtype())) + " but " +
                         first.name + " has dtype " + std::string(py::str(first.array.dtype())) +
                         "; they must agree");
  }
}

void CheckDim(const Tensor& t, int i, const char* what, std::int64_t expected, const Tensor& source) {
  if (t.dim(i) != expected) {
    throw py::value_error(t.name + " has " + what + " " + std::to_string(t.dim(i)) + " (shape " +
                          t.ShapeString() + ") but " + source.name + " has " + std::to_string(expected) +
                          " (shape " + source.ShapeString() + ")");
  }
}

void CheckQueryKeyValue(const Tensor& q, const Tensor& k, const Tensor& v, const KeyDimNames& k_dims) {
  CheckSameDType(q, k);
  CheckSameDType(q, v);
  CheckDim(k, 0, k_dims[0], q.dim(0), q);
  CheckDim(k, 3, k_dims[3], q.dim(3), q);
  for (int i = 0; i < 3; ++i) CheckDim(v, i, k_dims[static_cast<std::size_t>(i)], k.dim(i), k);
}

template <typename T>
py::array_t<T> ExactArray(const py::handle& object, const std::string& name, int ndim) {
  const py::array array = AsArray(object, name);
  if (!py::isinstance<py::array_t<T>>(array)) {
    throw py::type_error(name + " must have dtype " + std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(array.dtype())));
  }
  if (array.ndim() != ndim) {
    throw py::value_error(name + " must have " + std::to_string(ndim) + " dimension" +
                          (ndim == 1 ? "" : "s") + ", got " + std::to_string(array.ndim()));
  }
  if (!(array.flags() & py::array::c_style)) throw py::value_error(name + " must be C-contiguous");
  return py::reinterpret_borrow<py::array_t<T>>(array);
}

template py::array_t<std::int32_t> ExactArray(const py::handle&, const std::string&, int);
template py::array_t<float> ExactArray(const py::handle&, const std::string&, int);
template py::array_t<bool> ExactArray(const py::handle&, const std::string&, int);

namespace {

py::dtype NumpyType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return py::dtype("float32");
    case DType::kF16:
      return py::dtype("float16");
    case DType::kBF16:
      return py::dtype("int16");  // torch.from_numpy has no uint16
  }
  throw py::type_error("unknown element type");
}

}  // namespace

py::array NewArray(DType dtype, const std::vector<std::int64_t>& shape) {
  return py::array(NumpyType(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

py::array NewZeros(DType dtype, const std::vector<std::int64_t>& shape) {
  py::array array = NewArray(dtype, shape);
  std::fill_n(static_cast<char*>(array.mutable_data()), array.nbytes(), 0);
  return array;
}

Strides BatchStrides(const Tensor& t, bool head_major) {
  return head_major ? Strides{t.stride(0), t.stride(2), t.stride(1)}
                    : Strides{t.stride(0), t.stride(1), t.stride(2)};
}

AttentionParams AttentionInputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionParams p;
  p.dtype = q.dtype;
  p.batch = q.dim(0), p.seqlen_q = q.dim(1), p.heads_q = q.dim(2), p.head_dim = q.dim(3);
  p.seqlen_k = k.dim(1), p.heads_kv = k.dim(2), p.head_dim_v = v.dim(3);
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  p.q_strides = BatchStrides(q), p.k_strides = BatchStrides(k), p.v_strides = BatchStrides(v);
  return p;
}

}  // namespace flashattn::python
