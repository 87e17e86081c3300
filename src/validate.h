// Building blocks of the validation in validate.cc, shared by every entry point that takes tensors.
#ifndef FLASHATTN_VALIDATE_H_
#define FLASHATTN_VALIDATE_H_

#include <cstdint>
#include <vector>

namespace flashattn {

struct Dim {
  const char* name;
  std::int64_t size;
  std::int64_t stride;  // in elements
};

// A strided tensor as the validator sees it: where it is, how large its elements are, its dimensions.
struct TensorView {
  const char* name;
  const void* data;
  std::int64_t element_bytes;
  std::vector<Dim> dims;
  std::int64_t NumElements() const;  // INT64_MAX if the count overflows
};

struct ByteRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;  // exclusive; begin == end is empty
  bool Overlaps(const ByteRange& other) const {
    return begin < end && other.begin < other.end && begin < other.end && other.begin < end;
  }
};

ByteRange CheckTensor(const TensorView& tensor);
void CheckNoSelfOverlap(const TensorView& tensor);
// Checks every tensor, that no output overlaps itself, an input, or another output.
void CheckOutputs(const std::vector<TensorView>& outputs, const std::vector<TensorView>& inputs);

struct AttentionParams;
// Validate(params), and `keep` as MaterializeDropoutMask's output of (batch, Hq, Nq, Nk) bytes.
void ValidateDropoutMask(const AttentionParams& params, const std::uint8_t* keep);

}  // namespace flashattn

#endif  // FLASHATTN_VALIDATE_H_
