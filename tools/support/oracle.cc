#include "support/oracle.h"

#include <utility>

#include "reference/reference.h"

namespace flashattn::support {

OracleRows OracleHeadRows(const AttentionParams& params, std::int64_t b, std::int64_t h, std::int64_t row_begin,
                          std::int64_t row_end) {
  reference::OracleRows rows = reference::OracleHeadRows(params, b, h, row_begin, row_end);
  return {std::move(rows.o), std::move(rows.lse)};
}

}  // namespace flashattn::support
