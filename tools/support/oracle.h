// The float64 oracle of the library's reference layer (docs/algorithms.md §7), row by row, for a program
// that checks a computed output on sampled rows instead of recomputing the whole problem.
#ifndef FLASHATTN_TOOLS_SUPPORT_ORACLE_H_
#define FLASHATTN_TOOLS_SUPPORT_ORACLE_H_

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::support {

// Query rows [row_begin, row_end) of (batch b, query head h) of validated `params`: o is rows×dv in
// float64, lse one value per row (−∞ for a row that sees no key).
struct OracleRows {
  std::vector<double> o;
  std::vector<double> lse;
};
OracleRows OracleHeadRows(const AttentionParams& params, std::int64_t b, std::int64_t h, std::int64_t row_begin,
                          std::int64_t row_end);

}  // namespace flashattn::support

#endif  // FLASHATTN_TOOLS_SUPPORT_ORACLE_H_
