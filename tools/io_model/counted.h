// The counted runs of io_model.h that are not reference algorithms: the fused kernel's and decode()'s loops
// in plain scalar code, every main-memory access through the accessors of src/reference/problem.h.
// Private to tools/io_model/: it names the reference layer's counter, which the programs do not see.
#ifndef FLASHATTN_TOOLS_IO_MODEL_COUNTED_H_
#define FLASHATTN_TOOLS_IO_MODEL_COUNTED_H_

#include <cstdint>

#include "flashattn/flashattn.h"
#include "reference/io_count.h"

namespace flashattn::io_model {

// Both take validated params that own their buffers, and write O and LSE.
reference::IoCount CountFused(const AttentionParams& params);                         // counted_fused.cc
reference::IoCount CountDecode(const AttentionParams& params, std::int64_t splits);  // counted_decode.cc

}  // namespace flashattn::io_model

#endif  // FLASHATTN_TOOLS_IO_MODEL_COUNTED_H_
