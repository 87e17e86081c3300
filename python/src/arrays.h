// NumPy arrays as the library sees them: element type, shape and strides in elements, checked once with
// errors that name the Python argument. Nothing here copies an array; the Python layer
// (flashattn/__init__.py) makes the few documented conversions (integer index arrays to int32, slopes and
// tables to float32).
#ifndef FLASHATTN_PYTHON_ARRAYS_H_
#define FLASHATTN_PYTHON_ARRAYS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::python {

namespace py = pybind11;

// One array argument: the array (kept alive), its element type and its strides counted in elements.
struct Tensor {
  std::string name;
  py::array array;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements

  const void* data() const { return array.data(); }
  std::int64_t dim(int i) const { return shape[static_cast<std::size_t>(i < 0 ? i + shape.size() : i)]; }
  std::int64_t stride(int i) const {
    return strides[static_cast<std::size_t>(i < 0 ? i + strides.size() : i)];
  }
  std::string ShapeString() const;
};

// The element type of an attention operand: float32, float16, or (when `bf16` is set by the PyTorch layer,
// which passes bfloat16 tensors as int16 views) bfloat16. Anything else is a TypeError naming `name`.
DType ElementType(const py::handle& object, const std::string& name, bool bf16);

// Checks that `object` is an ndarray of `ndim` dimensions (`layout` names them for the message), of an
// attention element type, whose byte strides are whole elements and whose last dimension is contiguous.
Tensor AttentionTensor(const py::handle& object, const std::string& name, int ndim, const char* layout,
                       bool bf16);

// TypeError unless `other` has the element type of `first`.
void CheckSameDType(const Tensor& first, const Tensor& other);

// ValueError unless dimension `i` of `t` (called `what`) has size `expected`, taken from `source`.
void CheckDim(const Tensor& t, int i, const char* what, std::int64_t expected, const Tensor& source);

// The names of K's four dimensions in a layout: {"batch", "seqlen_k", "heads_kv", "head_dim"} in flash-attn's,
// {"batch", "heads", "S", "E"} in PyTorch's head-major one.
using KeyDimNames = std::array<const char*, 4>;

// The checks that Q, K and V of one 4-dimensional layout agree: TypeError unless k and v have q's element
// type; ValueError unless k has q's batch and head dim and v has k's first three dimensions.
void CheckQueryKeyValue(const Tensor& q, const Tensor& k, const Tensor& v, const KeyDimNames& k_dims);

// A C-contiguous array of a fixed element type (int32 indices, float32 slopes, bool masks), checked only for
// type, rank and contiguity: the Python layer has converted it already.
template <typename T>
py::array_t<T> ExactArray(const py::handle& object, const std::string& name, int ndim);

// A new uninitialized array of `dtype` (bfloat16 as int16, which torch.from_numpy accepts).
py::array NewArray(DType dtype, const std::vector<std::int64_t>& shape);
py::array NewZeros(DType dtype, const std::vector<std::int64_t>& shape);

// Strides of a (batch, seq, head, dim) tensor, or of a (batch, head, seq, dim) one (`head_major`).
Strides BatchStrides(const Tensor& t, bool head_major = false);

// The AttentionParams of checked (batch, seq, head, dim) q, k, v: element type, sizes, pointers and strides;
// the caller adds the outputs and the modifiers.
AttentionParams AttentionInputs(const Tensor& q, const Tensor& k, const Tensor& v);

std::string ShapeString(const std::vector<std::int64_t>& shape);

// Makes `error` (flashattn._core.Error) the Python exception of the functions of the module being
// initialized for both kinds of invalid value: the library's flashattn::Error and the bindings' own
// py::value_error, so that a wrong shape or value is one exception type whichever layer finds it.
void RaiseInvalidValuesAs(const py::handle& error);

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_ARRAYS_H_
