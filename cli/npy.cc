// The .npy reader and writer: a strict parser for the header dict and exact checks of the file length.
#include "npy.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

namespace flashattn::npy {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::int64_t kMaxRank = 64;  // NumPy's own limit (NPY_MAXDIMS in NumPy 2)

template <typename... Parts>
[[noreturn]] void Fail(std::string_view name, const Parts&... parts) {
  std::ostringstream message;
  message << name << ": ";
  (message << ... << parts);
  throw NpyError(message.str());
}

// Product of the dimensions times `item_size`, or -1 if a dimension is negative, or -2 if it overflows
// int64. Zero-length dimensions give 0, but the other dimensions must still multiply without overflow
// (so that strides computed from the shape stay representable).
std::int64_t ShapeBytes(const std::vector<std::int64_t>& shape, std::int64_t item_size) {
  std::int64_t nonzero_product = item_size;
  bool has_zero = false;
  for (std::int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product)) return -2;
  }
  return has_zero ? 0 : nonzero_product;
}

Dtype ParseDescr(std::string_view descr, std::string_view name) {
  for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kF64, Dtype::kU8, Dtype::kBool}) {
    if (descr == Descr(dtype)) return dtype;
  }
  if (!descr.empty() && descr[0] == '>') Fail(name, "big-endian dtype '", descr, "' is not supported");
  Fail(name, "unsupported dtype '", descr, "' (supported: '<f4' float32, '<f2' float16, '<f8' float64, ",
       "'|u1' uint8, '|b1' bool; bfloat16 has no numpy dtype: convert it to float32)");
}

// The header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, parsed strictly: the
// three keys exactly once each, Python literals of the right type, nothing after the closing brace but
// whitespace (NumPy pads with spaces and ends with a newline).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  void Parse(std::string* descr, bool* fortran_order, std::vector<std::int64_t>* shape) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    Expect('{');
    while (!Consume('}')) {
      const std::string key = ParseString();
      Expect(':');
      if (key == "descr") {
        Once(&seen_descr, key);
        if (Peek() != '\'' && Peek() != '"')
          Bad("'descr' must be a string (structured dtypes are not supported)");
        *descr = ParseString();
      } else if (key == "fortran_order") {
        Once(&seen_fortran, key);
        *fortran_order = ParseBool();
      } else if (key == "shape") {
        Once(&seen_shape, key);
        *shape = ParseShape();
      } else {
        Bad("unexpected key '", key, "'");
      }
      if (!Consume(',')) {
        Expect('}');
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) Bad("unexpected text after the closing '}' at offset ", pos_);
    if (!seen_descr) Bad("missing key 'descr'");
    if (!seen_fortran) Bad("missing key 'fortran_order'");
    if (!seen_shape) Bad("missing key 'shape'");
  }

 private:
  template <typename... Parts>
  [[noreturn]] void Bad(const Parts&... parts) {
    Fail(name_, "bad header: ", parts...);
  }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool Consume(char c) {
    if (Peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }
  void Expect(char c) {
    if (!Consume(c)) {
      if (pos_ >= text_.size()) Bad("expected '", c, "' but the header ends");
      Bad("expected '", c, "' at offset ", pos_, ", found '", text_[pos_], "'");
    }
  }
  void Once(bool* seen, const std::string& key) {
    if (*seen) Bad("key '", key, "' appears twice");
    *seen = true;
  }
  std::string ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') Bad("expected a quoted string at offset ", pos_);
    const std::size_t end = text_.find(quote, ++pos_);
    if (end == std::string_view::npos) Bad("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) Bad("escape sequences in strings are not supported");
    pos_ = end + 1;
    return value;
  }
  bool ParseBool() {
    SkipSpace();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    Bad("'fortran_order' must be True or False");
  }
  std::int64_t ParseDim() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      Bad("'shape' must be a tuple of non-negative integers");
    }
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        Bad("a dimension of 'shape' does not fit in 64 bits");
      }
      ++pos_;
    }
    return value;
  }
  // "()", "(n,)" or "(n, m, ...)" with an optional trailing comma.
  std::vector<std::int64_t> ParseShape() {
    std::vector<std::int64_t> shape;
    Expect('(');
    if (Consume(')')) return shape;
    while (true) {
      shape.push_back(ParseDim());
      if (static_cast<std::int64_t>(shape.size()) > kMaxRank)
        Bad("'shape' has more than ", kMaxRank, " dimensions");
      if (Consume(')')) break;
      Expect(',');
      if (Consume(')')) break;
    }
    return shape;
  }

  std::string_view text_;
  std::string_view name_;
  std::size_t pos_ = 0;
};

std::uint32_t LittleEndian(std::string_view bytes) {
  std::uint32_t value = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

// Magic (6 bytes), version (2 bytes), header length (2 bytes in 1.0, 4 in 2.0 and 3.0).
constexpr std::size_t kMaxPreamble = 12;

// Checks the preamble in `start` (the first min(kMaxPreamble, file_size) bytes of a file of `file_size`
// bytes) and returns where the data begins; *header_begin is where the header text begins.
std::size_t DataOffset(std::string_view start, std::uint64_t file_size, std::string_view name,
                       std::size_t* header_begin) {
  const std::string_view magic = start.substr(0, kMagic.size());
  if (magic != kMagic.substr(0, magic.size())) Fail(name, "bad magic: not a .npy file");
  if (file_size < kMagic.size() + 2) {
    Fail(name, "truncated: ", file_size, " bytes end before the magic and format version");
  }
  const int major = static_cast<unsigned char>(start[6]), minor = static_cast<unsigned char>(start[7]);
  if (major < 1 || major > 3 || minor != 0) {
    Fail(name, "unsupported format version ", major, ".", minor, " (expected 1.0, 2.0 or 3.0)");
  }
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (file_size < 8 + length_bytes) Fail(name, "truncated: the file ends inside the header length");
  const std::uint32_t header_length = LittleEndian(start.substr(8, length_bytes));
  *header_begin = 8 + length_bytes;
  if (file_size < *header_begin + header_length) {
    Fail(name, "truncated: the header is ", header_length, " bytes but the file ends after ",
         file_size - *header_begin);
  }
  return *header_begin + header_length;
}

// What the header says about the data.
struct Layout {
  Dtype dtype;
  std::string descr;
  std::vector<std::int64_t> shape;
  std::int64_t data_bytes;
};

Layout ParseLayout(std::string_view header, std::string_view name) {
  Layout layout;
  bool fortran_order = false;
  HeaderParser(header, name).Parse(&layout.descr, &fortran_order, &layout.shape);
  layout.dtype = ParseDescr(layout.descr, name);
  if (fortran_order) Fail(name, "Fortran-order arrays are not supported (save a C-contiguous array)");
  layout.data_bytes = ShapeBytes(layout.shape, static_cast<std::int64_t>(ItemSize(layout.dtype)));
  if (layout.data_bytes < 0) {
    Fail(name, "shape ", ShapeString(layout.shape), " is too large: its size overflows 64 bits");
  }
  return layout;
}

// The data must fill the rest of the file exactly.
void CheckDataLength(const Layout& layout, std::uint64_t available, std::string_view name) {
  const auto needed = static_cast<std::uint64_t>(layout.data_bytes);
  if (available != needed) {
    Fail(name, available < needed ? "truncated" : "trailing data", ": shape ", ShapeString(layout.shape),
         " of '", layout.descr, "' needs ", needed, " data bytes but the file has ", available);
  }
}

}  // namespace

std::string_view Descr(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "<f4";
    case Dtype::kF16:
      return "<f2";
    case Dtype::kF64:
      return "<f8";
    case Dtype::kU8:
      return "|u1";
    case Dtype::kBool:
      return "|b1";
  }
  return "?";
}

std::size_t ItemSize(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return 4;
    case Dtype::kF16:
      return 2;
    case Dtype::kF64:
      return 8;
    case Dtype::kU8:
    case Dtype::kBool:
      return 1;
  }
  return 0;
}

std::string ShapeString(const std::vector<std::int64_t>& shape) {
  std::ostringstream out;
  out << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << (shape.size() == 1 ? ",)" : ")");
  return out.str();
}

Array::Array(Dtype dtype, std::vector<std::int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  const std::int64_t bytes = ShapeBytes(shape_, static_cast<std::int64_t>(ItemSize(dtype_)));
  if (bytes == -1) Fail("array", "shape ", ShapeString(shape_), " has a negative dimension");
  if (bytes == -2) Fail("array", "shape ", ShapeString(shape_), " is too large: its size overflows 64 bits");
  num_elements_ = bytes / static_cast<std::int64_t>(ItemSize(dtype_));
  const auto n = static_cast<std::size_t>(num_elements_);
  switch (dtype_) {
    case Dtype::kF32:
      storage_ = std::vector<float>(n);
      break;
    case Dtype::kF16:
      storage_ = std::vector<std::uint16_t>(n);
      break;
    case Dtype::kF64:
      storage_ = std::vector<double>(n);
      break;
    case Dtype::kU8:
    case Dtype::kBool:
      storage_ = std::vector<std::uint8_t>(n);
      break;
  }
}

void* Array::data() {
  return std::visit([](auto& elements) -> void* { return elements.data(); }, storage_);
}

const void* Array::data() const { return const_cast<Array*>(this)->data(); }

template <typename T>
T* Array::Data() {
  auto* elements = std::get_if<std::vector<T>>(&storage_);
  if (elements == nullptr) Fail("array", "typed access does not match its dtype '", Descr(dtype_), "'");
  return elements->data();
}
template float* Array::Data<float>();
template std::uint16_t* Array::Data<std::uint16_t>();
template double* Array::Data<double>();
template std::uint8_t* Array::Data<std::uint8_t>();

Array Decode(std::string_view bytes, std::string_view name) {
  std::size_t header_begin;
  const std::size_t data_offset =
      DataOffset(bytes.substr(0, kMaxPreamble), bytes.size(), name, &header_begin);
  const Layout layout = ParseLayout(bytes.substr(header_begin, data_offset - header_begin), name);
  CheckDataLength(layout, bytes.size() - data_offset, name);
  Array array(layout.dtype, layout.shape);
  if (layout.data_bytes > 0) {
    std::memcpy(array.data(), bytes.data() + data_offset, static_cast<std::size_t>(layout.data_bytes));
  }
  return array;
}

std::string Encode(const Array& array) {
  std::string header = "{'descr': '" + std::string(Descr(array.dtype())) +
                       "', 'fortran_order': False, 'shape': " + ShapeString(array.shape()) + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, and end the header with a newline.
  const std::size_t prefix = 10;  // magic, version, 2-byte length
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 0xffff) Fail("array", "header of ", header.size(), " bytes does not fit format 1.0");
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(array.data()), static_cast<std::size_t>(array.NumBytes()));
  return out;
}

// Reads a regular file in three steps (preamble, header, data straight into the array), so that a large
// array is not held twice; other files (pipes) are read whole and decoded.
Array Read(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) Fail(path, "cannot open: ", std::strerror(errno));
  auto read_exactly = [&](void* dst, std::size_t n) {
    if (std::fread(dst, 1, n, file.get()) != n) {
      Fail(path,
           "cannot read: ", std::ferror(file.get()) ? std::strerror(errno) : "the file shrank while reading");
    }
  };
  struct stat info;
  if (fstat(fileno(file.get()), &info) != 0) Fail(path, "cannot read: ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) {
    std::string bytes;
    char buffer[1 << 16];
    std::size_t got;
    while ((got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) bytes.append(buffer, got);
    if (std::ferror(file.get())) Fail(path, "cannot read: ", std::strerror(errno));
    return Decode(bytes, path);
  }
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  std::string start(std::min<std::uint64_t>(kMaxPreamble, file_size), '\0');
  read_exactly(start.data(), start.size());
  std::size_t header_begin;
  const std::size_t data_offset = DataOffset(start, file_size, path, &header_begin);
  std::string header(data_offset - header_begin, '\0');
  if (std::fseek(file.get(), static_cast<long>(header_begin), SEEK_SET) != 0) {
    Fail(path, "cannot read: ", std::strerror(errno));
  }
  read_exactly(header.data(), header.size());
  const Layout layout = ParseLayout(header, path);
  CheckDataLength(layout, file_size - data_offset, path);
  Array array(layout.dtype, layout.shape);
  read_exactly(array.data(), static_cast<std::size_t>(layout.data_bytes));
  return array;
}

void Write(const std::string& path, const Array& array) {
  const std::string bytes = Encode(array);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) Fail(path, "cannot create: ", std::strerror(errno));
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    Fail(path, "cannot write: ", std::strerror(errno));
  }
  if (std::fclose(file.release()) != 0) Fail(path, "cannot write: ", std::strerror(errno));
}

}  // namespace flashattn::npy
