// Reading and writing NumPy's .npy files (format versions 1.0, 2.0 and 3.0 on read; 1.0 on write).
//
// A file is the magic "\x93NUMPY", a version (major, minor), a little-endian header length (2 bytes in
// version 1.0, 4 bytes in 2.0 and 3.0), a header that is a Python dict literal with exactly the keys
// 'descr', 'fortran_order' and 'shape', then the array's elements in C order and nothing after them.
//
// Element types (the 'descr' string): '<f4' (float32), '<f2' (IEEE float16), '<f8' (float64), and for
// boolean masks '|u1' (uint8) and '|b1' (numpy bool; stored as one byte 0/1). Only little-endian data
// is accepted ('>' and '=' byte orders are rejected), only C order (fortran_order False). NumPy has no
// bfloat16 dtype, so bfloat16 arrays are neither read nor written: convert them to float32 first
// (ml_dtypes writes them as an opaque void type such as '<V2', which is rejected as unsupported).
//
// Every malformed file is reported with an NpyError whose message starts with the file's name and says
// what is wrong (truncated, bad magic, bad version, bad header, unsupported dtype, Fortran order, a shape
// whose size overflows, a data length that does not match the shape).
#ifndef FLASHATTN_CLI_NPY_H_
#define FLASHATTN_CLI_NPY_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace flashattn::npy {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Dtype : std::uint8_t { kF32, kF16, kF64, kU8, kBool };

std::string_view Descr(Dtype dtype);  // "<f4", "<f2", "<f8", "|u1", "|b1"
std::size_t ItemSize(Dtype dtype);

// An n-dimensional array in C order. Float16 elements are kept as their raw IEEE binary16 bits.
class Array {
 public:
  Array() : Array(Dtype::kF32, {}) {}
  // A zero-filled array; throws NpyError if a dimension is negative or the size overflows.
  Array(Dtype dtype, std::vector<std::int64_t> shape);

  Dtype dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t NumElements() const { return num_elements_; }
  std::int64_t NumBytes() const { return num_elements_ * static_cast<std::int64_t>(ItemSize(dtype_)); }
  void* data();
  const void* data() const;

  // Typed access; throws NpyError if T does not match the dtype (uint16_t for float16, uint8_t for
  // uint8 and bool).
  template <typename T>
  T* Data();
  template <typename T>
  const T* Data() const {
    return const_cast<Array*>(this)->Data<T>();
  }

 private:
  Dtype dtype_;
  std::vector<std::int64_t> shape_;
  std::int64_t num_elements_ = 0;
  std::variant<std::vector<float>, std::vector<std::uint16_t>, std::vector<double>, std::vector<std::uint8_t>>
      storage_;
};

// "(2, 3, 4)" — the shape as NumPy prints it, for messages.
std::string ShapeString(const std::vector<std::int64_t>& shape);

// Parses the bytes of a whole .npy file; `name` (a path) starts every error message.
Array Decode(std::string_view bytes, std::string_view name);
// The bytes of a version 1.0 .npy file holding `array`.
std::string Encode(const Array& array);

// Reads a .npy file; throws NpyError naming the file if it cannot be read or is malformed.
Array Read(const std::string& path);
// Writes `array` to `path` (created or replaced in place; see cli/output_file.h for atomic replacement).
void Write(const std::string& path, const Array& array);

}  // namespace flashattn::npy

#endif  // FLASHATTN_CLI_NPY_H_
