// libFuzzer target: the .npy reader (cli/npy.h) on arbitrary bytes, through Decode (bytes in memory) and
// Read (the same bytes as a file, read in pieces). Each input must either be rejected by both with an
// NpyError whose message starts with the name (any other exception escapes and is reported as a crash), or
// give the same array from both, one that is what the bytes say: its data are the file's last NumBytes()
// bytes, and writing it and reading it back gives the same array.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "npy.h"
#include "oracle_check.h"

namespace flashattn::fuzz {
namespace {

bool SameArray(const npy::Array& a, const npy::Array& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.NumBytes() == 0 || std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.NumBytes())) == 0);
}

// The array, or nullopt if the reader rejected the input with a well-formed NpyError.
template <typename ReadArray>
std::optional<npy::Array> Attempt(ReadArray&& read, const std::string& name) {
  try {
    return read();
  } catch (const npy::NpyError& error) {
    if (std::string_view(error.what()).substr(0, name.size() + 2) != name + ": ") {
      Fail("the error does not start with the file's name " + name + ": " + error.what());
    }
    return std::nullopt;
  }
}

// The bytes as a file: an anonymous memory file named through /proc/self/fd.
class MemoryFile {
 public:
  MemoryFile(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("npy_fuzz", 0)) {
    if (fd_ < 0 || write(fd_, data, size) != static_cast<ssize_t>(size)) Fail("cannot create the memory file");
  }
  ~MemoryFile() { close(fd_); }
  std::string Path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

void Run(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::optional<npy::Array> decoded = Attempt([&] { return npy::Decode(bytes, "fuzz.npy"); }, "fuzz.npy");
  const MemoryFile file(data, size);
  const std::optional<npy::Array> read = Attempt([&] { return npy::Read(file.Path()); }, file.Path());
  if (decoded.has_value() != read.has_value() || (decoded && !SameArray(*decoded, *read))) {
    Fail("Decode and Read disagree");
  }
  if (!decoded) return;

  const npy::Array& array = *decoded;
  bool has_zero = false;
  for (std::int64_t dim : array.shape()) {
    if (dim < 0) Fail("negative dimension in " + npy::ShapeString(array.shape()));
    has_zero |= dim == 0;
  }
  std::int64_t elements = has_zero ? 0 : 1;
  for (std::int64_t dim : array.shape()) {
    if (!has_zero && __builtin_mul_overflow(elements, dim, &elements)) Fail("element count overflows");
  }
  const auto data_bytes = static_cast<std::size_t>(array.NumBytes());
  if (array.NumElements() != elements || data_bytes > size) Fail("size does not match the shape");
  if (data_bytes > 0 && std::memcmp(array.data(), data + size - data_bytes, data_bytes) != 0) {
    Fail("the array's bytes are not the file's data");
  }
  if (!SameArray(npy::Decode(npy::Encode(array), "again.npy"), array)) Fail("Encode then Decode changed the array");
}

}  // namespace
}  // namespace flashattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  flashattn::fuzz::Run(data, size);
  return 0;
}
