// Traffic between main memory and fast memory, as the reference algorithms count it (problem.h) and the
// IO model predicts it (tools/io_model/).
#ifndef FLASHATTN_REFERENCE_IO_COUNT_H_
#define FLASHATTN_REFERENCE_IO_COUNT_H_

#include <cstdint>

namespace flashattn::reference {

// Elements and bytes read from and written to main memory.
struct IoCount {
  std::int64_t read = 0;
  std::int64_t written = 0;
  std::int64_t read_bytes = 0;
  std::int64_t written_bytes = 0;

  IoCount& operator+=(const IoCount& other) {
    read += other.read, written += other.written;
    read_bytes += other.read_bytes, written_bytes += other.written_bytes;
    return *this;
  }
  bool operator==(const IoCount&) const = default;
};

}  // namespace flashattn::reference

#endif  // FLASHATTN_REFERENCE_IO_COUNT_H_
