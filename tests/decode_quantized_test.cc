// Quantized KV caches (int8, FP8 E4M3 and E5M2) and mixed-precision decode: the scalar formats (rounding,
// saturation, subnormals), quantize_kv, the quantizing append, and the kernel on every SIMD target against
// the float64 reference decode over the dequantized cache (docs/quantized_cache.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/cache_element_traits.h"
#include "common/element.h"
#include "common/quantize.h"
#include "common/score.h"
#include "decode/decode.h"
#include "flashattn/c_api.h"
#include "flashattn/decode.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The quantized element types, and those of the FP8 formats.
constexpr CacheElement kQuantizedElements[] = {CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2};
constexpr CacheElement kFp8Elements[] = {CacheElement::kFp8E4M3, CacheElement::kFp8E5M2};

std::int8_t Int8Of(float x) { return static_cast<std::int8_t>(Int8Traits::Encode(x)); }

// Decode(Encode(x)) of the element type.
float RoundTo(CacheElement element, float x) {
  return VisitQuantizedElement(element, [&](auto traits) {
    using Traits = decltype(traits);
    return Traits::Decode(Traits::Encode(x));
  });
}

// ---- The scalar formats -------------------------------------------------------------------------------------

TEST(Fp8E4M3, EveryCodeDecodesToItsValueAndEncodesBack) {
  for (int code = 0; code < 256; ++code) {
    const auto bits = static_cast<std::uint8_t>(code);
    const int exponent = (code >> 3) & 15, mantissa = code & 7;
    const double sign = code & 0x80 ? -1.0 : 1.0;
    const float value = E4M3Traits::Decode(bits);
    if (exponent == 15 && mantissa == 7) {  // S.1111.111: NaN
      EXPECT_TRUE(std::isnan(value)) << code;
      EXPECT_EQ(E4M3Traits::Encode(value) & 0x7f, 0x7f) << code;
      continue;
    }
    const double expected = exponent == 0 ? sign * mantissa * std::ldexp(1.0, -9)
                                          : sign * (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
    EXPECT_EQ(value, expected) << code;
    EXPECT_EQ(E4M3Traits::Encode(value), bits) << code;
  }
  EXPECT_EQ(E4M3Traits::Decode(0x7e), 448.0f);
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(1.0625f)), 1.0f);    // halfway 1 and 1.125: even mantissa 0
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(1.1875f)), 1.25f);   // halfway 1.125 and 1.25: even mantissa 2
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(1.07f)), 1.125f);    // above halfway
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(-3.3f)), -3.25f);
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(440.0f)), 448.0f);   // above halfway between 416 and 448
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(432.0f)), 448.0f);   // halfway 416 (mantissa 5) and 448 (6): even
  EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(431.0f)), 416.0f);
  for (float big : {449.0f, 464.0f, 500.0f, 1e30f, kInf}) {
    EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(big)), 448.0f) << big;
    EXPECT_EQ(E4M3Traits::Decode(E4M3Traits::Encode(-big)), -448.0f) << big;
  }
}

TEST(Fp8E4M3, Subnormals) {
  const float tiny = std::ldexp(1.0f, -9);  // the smallest subnormal, code 1
  EXPECT_EQ(E4M3Traits::Encode(tiny), 0x01);
  EXPECT_EQ(E4M3Traits::Encode(0.5f * tiny), 0x00);         // halfway 0 and tiny: even (0)
  EXPECT_EQ(E4M3Traits::Encode(0.51f * tiny), 0x01);
  EXPECT_EQ(E4M3Traits::Encode(1.5f * tiny), 0x02);         // halfway 1 and 2: even (2)
  EXPECT_EQ(E4M3Traits::Encode(2.5f * tiny), 0x02);         // halfway 2 and 3: even (2)
  EXPECT_EQ(E4M3Traits::Encode(-7.0f * tiny), 0x87);        // the largest subnormal
  EXPECT_EQ(E4M3Traits::Encode(7.5f * tiny), 0x08);         // halfway 7·tiny and 2⁻⁶ rounds up to the smallest normal
  EXPECT_EQ(E4M3Traits::Decode(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(E4M3Traits::Encode(1e-30f), 0x00);
  EXPECT_EQ(E4M3Traits::Encode(-0.0f), 0x80);
}

// Every code: sign, 5 exponent bits of bias 15, 2 mantissa bits, subnormals m·2⁻¹⁶, S.11111.00 = ±inf and
// S.11111.xx = NaN. Every finite code encodes back to itself; ±inf saturates to ±57344 and NaN stays NaN.
TEST(Fp8E5M2, EveryCodeDecodesToItsValueAndEncodesBack) {
  for (int code = 0; code < 256; ++code) {
    const auto bits = static_cast<std::uint8_t>(code);
    const int exponent = (code >> 2) & 31, mantissa = code & 3;
    const double sign = code & 0x80 ? -1.0 : 1.0;
    const float value = E5M2Traits::Decode(bits);
    if (exponent == 31 && mantissa == 0) {
      EXPECT_EQ(value, sign * kInf) << code;
      EXPECT_EQ(E5M2Traits::Encode(value), (code & 0x80) | 0x7b) << code;
      continue;
    }
    if (exponent == 31) {
      EXPECT_TRUE(std::isnan(value)) << code;
      EXPECT_EQ(E5M2Traits::Encode(value) & 0x7f, 0x7f) << code;
      continue;
    }
    const double expected = exponent == 0 ? sign * mantissa * std::ldexp(1.0, -16)
                                          : sign * (1.0 + mantissa / 4.0) * std::ldexp(1.0, exponent - 15);
    EXPECT_EQ(value, expected) << code;
    EXPECT_EQ(E5M2Traits::Encode(value), bits) << code;
    EXPECT_EQ(value, F32FromF16(static_cast<std::uint16_t>(code << 8))) << code << ": the upper byte of a float16";
  }
  EXPECT_EQ(E5M2Traits::Decode(0x7b), 57344.0f);
  EXPECT_EQ(E5M2Traits::Decode(0xfb), -57344.0f);
}

TEST(Fp8E5M2, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 1.125f), 1.0f);    // halfway 1 and 1.25: even mantissa 0
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 1.375f), 1.5f);    // halfway 1.25 and 1.5: even mantissa 2
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 1.13f), 1.25f);    // above halfway
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, -3.3f), -3.5f);
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 53248.0f), 49152.0f);  // halfway 1.5·2¹⁵ (mantissa 2) and 57344: even
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 53249.0f), 57344.0f);
  EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, 53247.0f), 49152.0f);
  // Beyond the largest finite value: saturated, as vLLM's saturating conversion (61440 and up would round to inf)
  for (float big : {57345.0f, 61439.0f, 61440.0f, 65504.0f, 1e30f, kInf}) {
    EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, big), 57344.0f) << big;
    EXPECT_EQ(RoundTo(CacheElement::kFp8E5M2, -big), -57344.0f) << big;
  }
  EXPECT_TRUE(std::isnan(RoundTo(CacheElement::kFp8E5M2, kNaN)));
}

TEST(Fp8E5M2, Subnormals) {
  const float tiny = std::ldexp(1.0f, -16);  // the smallest subnormal, code 1
  EXPECT_EQ(E5M2Traits::Encode(tiny), 0x01);
  EXPECT_EQ(E5M2Traits::Encode(0.5f * tiny), 0x00);   // halfway 0 and tiny: even (0)
  EXPECT_EQ(E5M2Traits::Encode(0.51f * tiny), 0x01);
  EXPECT_EQ(E5M2Traits::Encode(1.5f * tiny), 0x02);   // halfway 1 and 2: even (2)
  EXPECT_EQ(E5M2Traits::Encode(2.5f * tiny), 0x02);   // halfway 2 and 3: even (2)
  EXPECT_EQ(E5M2Traits::Encode(-3.0f * tiny), 0x83);  // the largest subnormal
  EXPECT_EQ(E5M2Traits::Encode(3.5f * tiny), 0x04);   // halfway 3·tiny and 2⁻¹⁴ rounds up to the smallest normal
  EXPECT_EQ(E5M2Traits::Decode(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(E5M2Traits::Encode(1e-30f), 0x00);
  EXPECT_EQ(E5M2Traits::Encode(-0.0f), 0x80);
}

TEST(Int8, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(Int8Of(2.5f), 2);
  EXPECT_EQ(Int8Of(3.5f), 4);
  EXPECT_EQ(Int8Of(-2.5f), -2);
  EXPECT_EQ(Int8Of(-0.49f), 0);
  EXPECT_EQ(Int8Of(126.5f), 126);
  EXPECT_EQ(Int8Of(127.4f), 127);
  EXPECT_EQ(Int8Of(1000.0f), 127);
  EXPECT_EQ(Int8Of(-1000.0f), -127);  // symmetric: −128 is never produced
}

// ---- quantize_kv ------------------------------------------------------------------------------------------

TEST(QuantizeKv, ScalesAreMaxOverQmaxAndValuesRoundTheQuotient) {
  const std::int64_t outer = 2, seqlen = 3, heads = 2, d = 8;
  std::vector<float> x(outer * seqlen * heads * d);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::fill(x.begin() + 8, x.begin() + 12, 0.0f);  // row (0, 0, 1): an all-zero group of 4
  for (const auto& [element, granularity, group] :
       {std::tuple{CacheElement::kInt8, ScaleGranularity::kPerToken, 0},
        std::tuple{CacheElement::kInt8, ScaleGranularity::kPerToken, 4},
        std::tuple{CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0},
        std::tuple{CacheElement::kFp8E4M3, ScaleGranularity::kPerTensor, 0},
        std::tuple{CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0},
        std::tuple{CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 4}}) {
    QuantizeParams p;
    p.x = x.data(), p.outer = outer, p.seqlen = seqlen, p.heads = heads, p.head_dim = d;
    p.element = element, p.granularity = granularity, p.group_size = group;
    p.set_contiguous_strides();
    std::vector<std::uint8_t> values(x.size(), 0xAA);
    std::vector<float> scales(x.size(), kNaN);
    p.values = values.data(), p.scales = scales.data();
    quantize_kv(p);
    const float qmax = QuantMax(element);
    const std::int64_t g = group > 0 ? group : d;
    for (std::int64_t n = 0; n < static_cast<std::int64_t>(x.size()); ++n) {
      const std::int64_t row = n / d, e = n % d, h = row % heads;
      // The scale of element n and the values it covers.
      std::int64_t scale_index = 0;
      float max_abs = 0.0f;
      for (std::int64_t m = 0; m < static_cast<std::int64_t>(x.size()); ++m) {
        const bool covered = granularity == ScaleGranularity::kPerTensor ? true
                             : granularity == ScaleGranularity::kPerHead ? m / d % heads == h
                                                                         : m / d == row && m % d / g == e / g;
        if (covered) max_abs = std::max(max_abs, std::fabs(x[m]));
      }
      if (granularity == ScaleGranularity::kPerToken) scale_index = row * (d / g) + e / g;
      if (granularity == ScaleGranularity::kPerHead) scale_index = h;
      const float scale = scales[scale_index];
      ASSERT_EQ(scale, max_abs / qmax) << n;
      const float q = LoadQuantized(values.data(), element, n);
      if (scale == 0.0f) {
        EXPECT_EQ(values[n], 0) << "an all-zero group stores zeros";
        continue;
      }
      if (element == CacheElement::kInt8) {
        EXPECT_EQ(q, std::nearbyint(x[n] / scale)) << n;  // the default rounding mode: to nearest even
      } else {
        EXPECT_EQ(q, RoundTo(element, x[n] / scale)) << n;
      }
    }
  }
}

// quantize_kv's vector code stores the bytes and scales of the scalar rows the decode kernel's append and the
// reference decode use (common/quantize.h's QuantizeRow), on every target, for inputs of every float type, head
// dims with tails, and every format. The values span 2⁻¹² (E5M2: 2⁻³⁰) to 2⁸ times Gaussians, so that FP8 codes
// are subnormal and normal; each head's first row also holds exact ties at a scale of 1 (its largest magnitude
// qmax).
TEST(QuantizeKv, EveryTargetStoresTheBytesOfTheScalarRows) {
  const std::int64_t outer = 2, seqlen = 5, heads = 3;
  struct Format {
    CacheElement element;
    ScaleGranularity granularity;
    std::int64_t group_size;
  };
  const Format formats[] = {{CacheElement::kInt8, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 8},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 32},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerTensor, 0},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerTensor, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 8}};
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
    for (const std::int64_t d : {40, 59, 128, 576})
      for (const Format& f : formats) {
        if (f.group_size > 0 && d % f.group_size != 0) continue;
        const float qmax = QuantMax(f.element);
        const std::int64_t rows = outer * seqlen * heads, n = rows * d;
        std::vector<float> x(n);
        std::uniform_int_distribution<int> exponent(f.element == CacheElement::kFp8E5M2 ? -30 : -12, 4);
        for (float& v : x) v = std::ldexp(normal(rng), exponent(rng));
        const std::vector<float> ties =
            f.element == CacheElement::kInt8      ? std::vector<float>{2.5f, -3.5f, 0.5f, -126.5f, 127.0f}
            : f.element == CacheElement::kFp8E4M3 ? std::vector<float>{1.0625f, -1.1875f, 0x1p-10f, 0x3p-10f, 448.0f}
                                                  : std::vector<float>{1.125f, -1.375f, 0x1p-17f, 0x3p-17f, -53248.0f,
                                                                       57344.0f};
        for (std::int64_t h = 0; h < heads; ++h) std::copy(ties.begin(), ties.end(), x.begin() + h * d);
        std::vector<std::uint8_t> input(n * size_of(dtype));
        for (std::int64_t e = 0; e < n; ++e) StoreFromFloat(input.data(), dtype, e, x[e]);
        // The scalar rows: the fixed scale max|x| / qmax over a head or the tensor, then QuantizeRow.
        const std::int64_t groups = f.group_size > 0 ? d / f.group_size : 1;
        std::vector<float> expected_scales(rows * groups, 0.0f), row(d);
        std::vector<std::uint8_t> expected(n);
        if (f.granularity != ScaleGranularity::kPerToken) {
          for (std::int64_t e = 0; e < n; ++e) {
            float& m = expected_scales[f.granularity == ScaleGranularity::kPerHead ? e / d % heads : 0];
            m = std::max(m, std::fabs(LoadAsFloat(input.data(), dtype, e)));
          }
          for (float& scale : expected_scales) scale /= qmax;
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t e = 0; e < d; ++e) row[e] = LoadAsFloat(input.data(), dtype, r * d + e);
          float* scales = f.granularity == ScaleGranularity::kPerToken ? &expected_scales[r * groups]
                          : f.granularity == ScaleGranularity::kPerHead ? &expected_scales[r % heads]
                                                                       : &expected_scales[0];
          QuantizeRow(row.data(), d, f.element, f.granularity, f.group_size, scales, &expected[r * d]);
        }
        const std::int64_t scale_count = f.granularity == ScaleGranularity::kPerToken  ? rows * groups
                                         : f.granularity == ScaleGranularity::kPerHead ? heads
                                                                                       : 1;
        expected_scales.resize(scale_count);
        for (const std::int64_t target : targets) {
          simd::RestrictTargetForTest(target);
          QuantizeParams p;
          p.x = input.data(), p.dtype = dtype, p.outer = outer, p.seqlen = seqlen, p.heads = heads, p.head_dim = d;
          p.element = f.element, p.granularity = f.granularity, p.group_size = f.group_size;
          p.set_contiguous_strides();
          std::vector<std::uint8_t> values(n, 0xAA);
          std::vector<float> scales(scale_count, kNaN);
          p.values = values.data(), p.scales = scales.data();
          quantize_kv(p);
          std::ostringstream where;
          where << to_string(dtype) << " d " << d << " " << to_string(f.element) << " " << to_string(f.granularity)
                << " g " << f.group_size << " on " << simd::TargetName(target);
          EXPECT_EQ(scales, expected_scales) << where.str();
          for (std::int64_t e = 0; e < n; ++e) {
            ASSERT_EQ(values[e], expected[e]) << "element " << e << ", " << where.str();
          }
        }
        simd::RestrictTargetForTest(0);
      }
}

TEST(QuantizeKv, DefaultGranularityIsPerTokenForInt8AndForGroups) {
  EXPECT_EQ(default_scale_granularity(CacheElement::kInt8), ScaleGranularity::kPerToken);
  EXPECT_EQ(default_scale_granularity(CacheElement::kInt8, 32), ScaleGranularity::kPerToken);
  EXPECT_EQ(default_scale_granularity(CacheElement::kFp8E4M3), ScaleGranularity::kPerHead);
  EXPECT_EQ(default_scale_granularity(CacheElement::kFp8E4M3, 32), ScaleGranularity::kPerToken);
  EXPECT_EQ(default_scale_granularity(CacheElement::kFp8E5M2), ScaleGranularity::kPerHead);
  EXPECT_EQ(default_scale_granularity(CacheElement::kFp8E5M2, 32), ScaleGranularity::kPerToken);
}

TEST(QuantizeKv, RejectsNonFiniteValuesAndWritesNothing) {
  std::vector<float> x(2 * 4 * 16, 0.5f);
  x[37] = kInf;
  QuantizeParams p;
  p.x = x.data(), p.outer = 2, p.seqlen = 4, p.heads = 1, p.head_dim = 16;
  p.set_contiguous_strides();
  std::vector<std::uint8_t> values(x.size(), 0xAA);
  std::vector<float> scales(8, 7.0f);
  p.values = values.data(), p.scales = scales.data();
  try {
    quantize_kv(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("x holds inf at (0, 2, 0, 5)"), std::string::npos) << error.what();
  }
  EXPECT_EQ(values, std::vector<std::uint8_t>(x.size(), 0xAA));
  EXPECT_EQ(scales, std::vector<float>(8, 7.0f));
  p.group_size = 5;
  EXPECT_THROW(quantize_kv(p), Error);  // 5 does not divide 16
}

// ---- Decode over quantized caches -------------------------------------------------------------------------

struct QuantShape {
  std::int64_t Nq = 1, Nnew = 0, Hq = 4, Hkv = 2, d = 64, Nmax = 100;
  std::vector<std::int32_t> cached = {100, 45};
  DType dtype = DType::kF32;  // of q, k_new, v_new, o
  CacheElement element = CacheElement::kInt8;
  ScaleGranularity granularity = ScaleGranularity::kPerToken;
  std::int64_t group_size = 0;
  std::int64_t page_size = 0;
  std::int64_t dv = 0;  // > 0: V is the first dv features of the K rows (v_cache == k_cache, v_scale == k_scale)

  std::string ToString() const {
    std::ostringstream s;
    s << "nq" << Nq << "_new" << Nnew << "_hq" << Hq << "_hkv" << Hkv << "_d" << d << "_" << to_string(dtype) << "_"
      << to_string(element) << "_" << to_string(granularity) << "_g" << group_size << "_page" << page_size;
    if (dv > 0) s << "_dv" << dv << "_inside_k";
    return s.str();
  }
};

// A decode problem over a quantized cache: Gaussian values of every cache slot (the originals, kept as a
// float32 cache of the same layout), quantized with quantize_kv; Gaussian q, k_new, v_new of the query type.
class QuantCase {
 public:
  QuantCase(const QuantShape& shape, std::uint64_t seed) : shape_(shape) {
    DecodeParams& p = params_;
    const std::int64_t B = static_cast<std::int64_t>(shape.cached.size()), d = shape.d;
    p.batch = B, p.seqlen_q = shape.Nq, p.seqlen_new = shape.Nnew, p.heads_q = shape.Hq, p.heads_kv = shape.Hkv;
    p.head_dim = d, p.dtype = shape.dtype, p.causal = true;
    if (shape.dv > 0) p.head_dim_v = shape.dv;
    p.cache_element = shape.element, p.scale_granularity = shape.granularity, p.scale_group_size = shape.group_size;
    seqlens_ = shape.cached;
    p.cache_seqlens = seqlens_.data();
    std::mt19937_64 rng(seed);
    std::int64_t outer = B, rows = shape.Nmax;
    if (shape.page_size > 0) {
      p.page_size = rows = shape.page_size;
      p.max_pages = (shape.Nmax + shape.page_size - 1) / shape.page_size;
      p.num_pages = outer = B * p.max_pages + 1;
      p.block_table_stride = p.max_pages;
      table_.resize(B * p.max_pages);
      std::iota(table_.begin(), table_.end(), 1);
      std::shuffle(table_.begin(), table_.end(), rng);
      p.block_table = table_.data();
    } else {
      p.cache_seqlen_max = shape.Nmax;
    }
    p.set_contiguous_strides();
    const std::int64_t cache_elements = outer * rows * shape.Hkv * d;
    std::normal_distribution<float> normal;
    k_original_.resize(cache_elements), v_original_.resize(cache_elements);
    for (float& x : k_original_) x = normal(rng);
    for (float& x : v_original_) x = normal(rng);
    k_values_.resize(cache_elements), v_values_.resize(cache_elements);
    const std::int64_t groups = shape.group_size > 0 ? d / shape.group_size : 1;
    k_scales_.assign(std::max<std::int64_t>(1, outer * rows * shape.Hkv * groups), 0.0f);
    v_scales_.assign(k_scales_.size(), 0.0f);
    QuantizeParams quantize;
    quantize.outer = outer, quantize.seqlen = rows, quantize.heads = shape.Hkv, quantize.head_dim = d;
    quantize.element = shape.element, quantize.granularity = shape.granularity, quantize.group_size = shape.group_size;
    quantize.set_contiguous_strides();
    quantize.x = k_original_.data(), quantize.values = k_values_.data(), quantize.scales = k_scales_.data();
    quantize_kv(quantize);
    quantize.x = v_original_.data(), quantize.values = v_values_.data(), quantize.scales = v_scales_.data();
    quantize_kv(quantize);
    const bool inside = shape.dv > 0;
    p.k_cache = k_values_.data(), p.v_cache = inside ? p.k_cache : v_values_.data();
    p.k_scale = k_scales_.data(), p.v_scale = inside ? p.k_scale : v_scales_.data();

    const auto fill = [&](std::vector<std::uint8_t>& buffer, std::int64_t count) {
      buffer.resize(std::max<std::int64_t>(1, count) * size_of(shape.dtype));
      for (std::int64_t n = 0; n < count; ++n) StoreFromFloat(buffer.data(), shape.dtype, n, normal(rng));
    };
    fill(q_, B * shape.Nq * shape.Hq * d);
    fill(k_new_, B * shape.Nnew * shape.Hkv * d);
    fill(v_new_, B * shape.Nnew * shape.Hkv * d);
    p.q = q_.data(), p.k_new = k_new_.data(), p.v_new = inside ? nullptr : v_new_.data();
  }

  DecodeParams& params() { return params_; }
  const QuantShape& shape() const { return shape_; }
  std::vector<std::uint8_t>& k_new() { return k_new_; }

  // The same problem over float32 caches: the original values, or the quantized cache dequantized.
  DecodeParams OverFloats(bool original) {
    DecodeParams p = params_;
    p.cache_element = CacheElement::kFloat, p.cache_dtype = DType::kF32, p.k_scale = p.v_scale = nullptr;
    const bool inside = shape_.dv > 0;
    if (original) {
      p.k_cache = k_original_.data(), p.v_cache = inside ? p.k_cache : v_original_.data();
      return p;
    }
    k_dequantized_ = Dequantized(k_values_, k_scales_), v_dequantized_ = Dequantized(v_values_, v_scales_);
    p.k_cache = k_dequantized_.data(), p.v_cache = inside ? p.k_cache : v_dequantized_.data();
    return p;
  }

  // V's cache and scales made a copy of K's.
  void CopyKeysToValues() {
    std::copy(k_values_.begin(), k_values_.end(), v_values_.begin());  // in place: params() points at them
    std::copy(k_scales_.begin(), k_scales_.end(), v_scales_.begin());
  }

  // Every byte of the cache and its scales.
  std::vector<std::uint8_t> CacheBytes() const {
    std::vector<std::uint8_t> bytes = k_values_;
    bytes.insert(bytes.end(), v_values_.begin(), v_values_.end());
    for (const std::vector<float>* scales : {&k_scales_, &v_scales_}) {
      const auto* first = reinterpret_cast<const std::uint8_t*>(scales->data());
      bytes.insert(bytes.end(), first, first + scales->size() * sizeof(float));
    }
    return bytes;
  }

  // The per-token scale of cache row (b, j, hk) of K or V (one per row: no scale groups).
  float RowScale(bool key, std::int64_t b, std::int64_t j, std::int64_t hk) const {
    const DecodeParams& p = params_;
    const std::int64_t outer = p.paged() ? table_[b * p.max_pages + j / p.page_size] : b;
    const std::int64_t slot = p.paged() ? j % p.page_size : j;
    const Strides s = ScaleStridesOf(p);
    return (key ? k_scales_ : v_scales_)[outer * s.batch + slot * s.seq + hk * s.head];
  }

  // Cache row (b, j, hk) of K or V, dequantized, and the scales it was stored with.
  std::vector<float> Row(bool key, std::int64_t b, std::int64_t j, std::int64_t hk) const {
    const DecodeParams& p = params_;
    const std::int64_t outer = p.paged() ? table_[b * p.max_pages + j / p.page_size] : b;
    const std::int64_t slot = p.paged() ? j % p.page_size : j;
    const Strides s = ScaleStridesOf(p);
    std::vector<float> row(p.head_dim);
    LoadCacheRow(p, key ? k_values_.data() : v_values_.data(),
                 (key ? k_scales_ : v_scales_).data() + outer * s.batch + slot * s.seq + hk * s.head,
                 RowOffset(b, j, hk), row.data(), p.head_dim);
    return row;
  }

  // The code of feature e of cache row (b, j, hk) of K or V.
  std::uint8_t& Code(bool key, std::int64_t b, std::int64_t j, std::int64_t hk, std::int64_t e) {
    return (key ? k_values_ : v_values_)[RowOffset(b, j, hk) + e];
  }

 private:
  // The element offset of cache row (b, j, hk).
  std::int64_t RowOffset(std::int64_t b, std::int64_t j, std::int64_t hk) const {
    const DecodeParams& p = params_;
    const std::int64_t outer = p.paged() ? table_[b * p.max_pages + j / p.page_size] : b;
    const std::int64_t slot = p.paged() ? j % p.page_size : j;
    const Strides& c = p.cache_strides;
    return outer * c.batch + slot * c.seq + hk * c.head;
  }

  std::vector<float> Dequantized(const std::vector<std::uint8_t>& values, const std::vector<float>& scales) const {
    const DecodeParams& p = params_;
    const Strides s = ScaleStridesOf(p);
    const std::int64_t d = p.head_dim, rows = p.paged() ? p.page_size : p.cache_seqlen_max;
    std::vector<float> out(values.size());
    for (std::int64_t row = 0; row < static_cast<std::int64_t>(values.size()) / d; ++row) {
      const std::int64_t hk = row % p.heads_kv, slot = row / p.heads_kv % rows, outer = row / p.heads_kv / rows;
      LoadCacheRow(p, values.data(), scales.data() + outer * s.batch + slot * s.seq + hk * s.head, row * d,
                   out.data() + row * d, d);
    }
    return out;
  }

  QuantShape shape_;
  DecodeParams params_;
  std::vector<float> k_original_, v_original_, k_scales_, v_scales_, k_dequantized_, v_dequantized_;
  std::vector<std::uint8_t> k_values_, v_values_, q_, k_new_, v_new_;
  std::vector<std::int32_t> seqlens_, table_;
};

struct Output {
  std::vector<float> O, lse;
};

// decode(), or the float64 reference decode, on p writing fresh O and LSE buffers.
Output Attend(DecodeParams p, bool reference) {
  const std::int64_t count = p.batch * p.seqlen_q * p.heads_q * p.value_head_dim();
  std::vector<std::uint8_t> o(std::max<std::int64_t>(1, count) * size_of(p.dtype));
  Output out{std::vector<float>(count), std::vector<float>(std::max<std::int64_t>(1, p.batch * p.heads_q * p.seqlen_q))};
  p.o = o.data(), p.lse = out.lse.data();
  if (reference) {
    validate(p);
    reference::Decode(p);
  } else {
    decode(p);
  }
  for (std::int64_t n = 0; n < count; ++n) out.O[n] = LoadAsFloat(o.data(), p.dtype, n);
  return out;
}

// Normwise error max|ΔO| / max|O_ref|.
double NormwiseError(const Output& actual, const Output& expected) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t n = 0; n < expected.O.size(); ++n) {
    const double delta = std::fabs(double(actual.O[n]) - expected.O[n]);
    diff = std::isnan(delta) ? kInf : std::max(diff, delta);
    scale = std::max(scale, std::fabs(double(expected.O[n])));
  }
  return diff / scale;
}

// Σ(O − O_ref)² / Σ O_ref².
double Nmse(const Output& actual, const Output& expected) {
  double error = 0.0, energy = 0.0;
  for (std::size_t n = 0; n < expected.O.size(); ++n) {
    error += (double(actual.O[n]) - expected.O[n]) * (double(actual.O[n]) - expected.O[n]);
    energy += double(expected.O[n]) * expected.O[n];
  }
  return error / energy;
}

// The targets the int8 kernel is compiled for (AVX3_DL among them) that the tests run.
std::vector<std::int64_t> Int8TargetsUnderTest() { return TargetsUnderTest(decode_kernel::Int8KernelTargets()); }

// On each of `targets`, the kernel over c's quantized cache against the float64 reference over it: at most twice
// the error of the float32 kernel over the same dequantized values in float32 caches. Appended keys are written
// by every call alike (the same rows, the same bytes).
void ExpectWithinTwiceTheFloat32PathsError(QuantCase& c, const std::vector<std::int64_t>& targets) {
  const Output oracle = Attend(c.params(), true);
  const DecodeParams floats = c.OverFloats(false);
  const Output float_oracle = Attend(floats, true);
  for (const std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    const double float32_error = NormwiseError(Attend(floats, false), float_oracle);
    const double error = NormwiseError(Attend(c.params(), false), oracle);
    EXPECT_LE(error, 2.0 * float32_error + 1e-7) << c.shape().ToString() << " on " << simd::TargetName(target)
                                                  << " (float32 path: " << float32_error << ")";
  }
  simd::RestrictTargetForTest(0);
}

// The kernel over the quantized cache against the float64 reference over the same (dequantized) cache: at
// most twice the error of the float32 kernel (on the same target) over those dequantized values in float32
// caches, on every target, for direct rows (d a multiple of the vectors), widened ones (odd d) and grouped scales
// (groups of whole vectors or half of one scaled as the rows are loaded, smaller ones as they are widened), with
// 8, 4 and 1 query rows per K/V head (each takes tiles of its own shape where the rows are read straight).
TEST(DecodeQuantized, EveryTargetWithinTwiceTheFloat32PathsErrorOfTheOracle) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  const std::vector<std::int64_t> int8_targets = Int8TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  struct Format {
    CacheElement element;
    ScaleGranularity granularity;
    std::int64_t group_size;
  };
  // Groups of 2, 4 and 8 features are half a vector of 4, 8 and 16 lanes; 32 holds whole vectors.
  const Format formats[] = {{CacheElement::kInt8, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 2},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 4},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 8},
                            {CacheElement::kInt8, ScaleGranularity::kPerToken, 32},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerTensor, 0},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerToken, 8},
                            {CacheElement::kFp8E4M3, ScaleGranularity::kPerToken, 32},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerTensor, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 0},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 8},
                            {CacheElement::kFp8E5M2, ScaleGranularity::kPerToken, 32}};
  struct Rows {
    std::int64_t Nq, Hq, Hkv;
  };
  for (const Format& format : formats)
    for (const std::int64_t d : {40, 64, 111, 128, 256})
      for (const std::int64_t page_size : {0, 7})
        for (const Rows rows : {Rows{2, 8, 2}, Rows{1, 8, 2}, Rows{1, 4, 4}}) {
          if (format.group_size > 0 && d % format.group_size != 0) continue;
          if (rows.Nq * rows.Hq / rows.Hkv != 8 && d % 16 != 0) continue;  // widened rows: the same float tiles
          QuantShape shape{.Nq = rows.Nq, .Hq = rows.Hq, .Hkv = rows.Hkv, .d = d, .Nmax = 113,
                           .cached = {113, 97, 1}, .element = format.element, .granularity = format.granularity,
                           .group_size = format.group_size, .page_size = page_size};
          QuantCase c(shape, 7 + d);
          c.params().num_splits = 2;
          ExpectWithinTwiceTheFloat32PathsError(c, format.element == CacheElement::kInt8 ? int8_targets : targets);
        }
}

// V inside the K rows (multi-head latent attention: d 576, dv 512 on one K/V head; and tails): V's values are K's,
// scaled by K's scales. The bound of the test above on every target, with new keys appended (each row quantized
// once, its scales written once) and pages.
TEST(DecodeQuantized, ValuesInsideTheKeysWithinTwiceTheFloat32PathsError) {
  struct Case {
    std::int64_t d, dv, Hq, Hkv;
    CacheElement element;
    ScaleGranularity granularity;
    std::int64_t group_size;
  };
  constexpr auto kInt8 = CacheElement::kInt8, kFp8 = CacheElement::kFp8E4M3, kE5M2 = CacheElement::kFp8E5M2;
  constexpr auto kToken = ScaleGranularity::kPerToken;
  const Case cases[] = {{576, 512, 16, 1, kInt8, kToken, 0},
                        {576, 512, 16, 1, kInt8, kToken, 64},
                        {576, 512, 16, 1, kFp8, ScaleGranularity::kPerHead, 0},
                        {576, 512, 16, 1, kFp8, ScaleGranularity::kPerTensor, 0},
                        {128, 64, 8, 2, kInt8, kToken, 8},
                        {128, 64, 8, 2, kFp8, kToken, 32},
                        {111, 40, 8, 2, kInt8, kToken, 0},
                        {111, 40, 8, 2, kFp8, ScaleGranularity::kPerHead, 0},
                        {59, 59, 4, 2, kInt8, kToken, 0},
                        {576, 512, 16, 1, kE5M2, ScaleGranularity::kPerHead, 0},
                        {576, 512, 16, 1, kE5M2, ScaleGranularity::kPerTensor, 0},
                        {128, 64, 8, 2, kE5M2, kToken, 32},
                        {111, 40, 8, 2, kE5M2, ScaleGranularity::kPerHead, 0},
                        {59, 59, 4, 2, kE5M2, kToken, 0}};
  const std::vector<std::int64_t> int8_targets = Int8TargetsUnderTest();
  for (const Case& k : cases)
    for (const std::int64_t page_size : {0, 7}) {
      QuantShape shape{.Nq = 1, .Nnew = 2, .Hq = k.Hq, .Hkv = k.Hkv, .d = k.d, .Nmax = 113, .cached = {111, 95, 0},
                       .element = k.element, .granularity = k.granularity, .group_size = k.group_size,
                       .page_size = page_size, .dv = k.dv};
      QuantCase c(shape, 5 + k.d + k.dv);
      c.params().num_splits = 2;
      ExpectWithinTwiceTheFloat32PathsError(c, k.element == kInt8 ? int8_targets : TargetsUnderTest());
    }
}

// The integer options read V inside the K rows as they read a V cache of its own: over a V cache that copies the K
// cache and its scales, the LSE is that of V inside the keys bit for bit and the output's first dv features are
// its output up to float32's rounding (the integer P̃V sums its slices in another order at the tail), on every
// int8 target.
TEST(DecodeQuantized, IntegerOptionsReadValuesInsideTheKeysAsACopyOfThem) {
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;  // d, dv, Hq, Hkv
  for (const auto& [d, dv, Hq, Hkv] : std::initializer_list<Shape>{{576, 512, 16, 1}, {111, 40, 8, 2}, {128, 64, 8, 2}})
    for (const std::int64_t page_size : {0, 64})
      for (const auto& [query, probs] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        QuantShape shape{.Nq = 1, .Hq = Hq, .Hkv = Hkv, .d = d, .Nmax = 300, .cached = {300, 97, 1},
                         .page_size = page_size};
        QuantCase c(shape, 11 + d);
        c.CopyKeysToValues();
        DecodeParams& copied = c.params();
        copied.quantize_query_int8 = query, copied.quantize_probs_u8 = probs, copied.num_splits = 3;
        DecodeParams inside = copied;
        inside.v_cache = inside.k_cache, inside.v_scale = inside.k_scale, inside.head_dim_v = dv;
        inside.set_contiguous_strides();
        for (const std::int64_t target : Int8TargetsUnderTest()) {
          simd::RestrictTargetForTest(target);
          const Output expected = Attend(copied, false), out = Attend(inside, false);
          const std::string where = shape.ToString() + " dv " + std::to_string(dv) + (query ? " integer scores" : "") +
                                    (probs ? " integer P̃V" : "") + " on " + simd::TargetName(target);
          Output first_dv{std::vector<float>(out.O.size()), expected.lse};  // the copy's first dv features
          for (std::size_t n = 0; n < out.O.size(); ++n) first_dv.O[n] = expected.O[n / dv * d + n % dv];
          EXPECT_EQ(out.lse, expected.lse) << where;
          EXPECT_LE(NormwiseError(out, first_dv), 1e-6) << where;
        }
        simd::RestrictTargetForTest(0);
      }
}

// Every FP8 code (E4M3 and E5M2) reads as its value in the scores and in the output, on every target: one cached
// key whose K row holds the codes in order and whose V row holds them in reverse (d = 256; the inf and NaN
// patterns, which nothing writes, replaced by 0), scales of 1, and 256 query rows, row n one-hot at feature n.
// With one key each row's LSE is its score, k[n], and its output is V's row. The rows are 16 per K/V head
// (tiles of 8 rows) or 4 on each of 64 K/V heads holding the same rows (score tiles of 4 keys, four vectors of V
// per key).
TEST(DecodeQuantized, EveryFp8CodeReadsAsItsValueOnEveryTarget) {
  constexpr std::int64_t d = 256;
  struct Layout {
    std::int64_t rows, heads, heads_kv;  // rows·heads = d query rows
  };
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  for (const CacheElement element : kFp8Elements) {
    std::vector<std::uint8_t> k_row(d), v_row(d);
    for (std::int64_t n = 0; n < d; ++n) {
      const auto code = static_cast<std::uint8_t>(n);
      k_row[n] = std::isfinite(LoadQuantized(&code, element, 0)) ? code : 0;
    }
    for (std::int64_t n = 0; n < d; ++n) v_row[n] = k_row[d - 1 - n];
    for (const Layout layout : {Layout{16, 16, 1}, Layout{1, 256, 64}}) {
      const std::int64_t rows = layout.rows, heads = layout.heads, heads_kv = layout.heads_kv;
      std::vector<std::uint8_t> k, v;
      for (std::int64_t h = 0; h < heads_kv; ++h) {
        k.insert(k.end(), k_row.begin(), k_row.end());
        v.insert(v.end(), v_row.begin(), v_row.end());
      }
      std::vector<float> q(rows * heads * d, 0.0f);
      for (std::int64_t n = 0; n < rows * heads; ++n) q[n * d + n] = 1.0f;  // row (i, h) = n = i·heads + h
      float k_scale = 1.0f, v_scale = 1.0f;
      const std::int32_t cached = 1;
      DecodeParams p;
      p.seqlen_q = rows, p.heads_q = heads, p.heads_kv = heads_kv, p.head_dim = d, p.scale = 1.0f;
      p.cache_element = element, p.scale_granularity = ScaleGranularity::kPerTensor;
      p.cache_seqlen_max = 1, p.cache_seqlens = &cached;
      p.set_contiguous_strides();
      p.q = q.data(), p.k_cache = k.data(), p.v_cache = v.data(), p.k_scale = &k_scale, p.v_scale = &v_scale;
      for (const std::int64_t target : targets) {
        simd::RestrictTargetForTest(target);
        const Output out = Attend(p, false);
        const std::string where =
            std::string(to_string(element)) + " on " + simd::TargetName(target) + ", " + std::to_string(rows) + " rows";
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t n = i * heads + h;
            const float lse = out.lse[h * rows + i];  // LSE is (batch, Hq, Nq)
            const float k_value = LoadQuantized(k_row.data(), element, n);
            EXPECT_NEAR(lse, k_value, 1e-6 * std::fabs(k_value)) << "K code " << int(k_row[n]) << ", " << where;
            for (std::int64_t e = 0; e < d; ++e) {
              ASSERT_EQ(out.O[n * d + e], LoadQuantized(v_row.data(), element, e))
                  << "V code " << int(v_row[e]) << ", row " << n << ", " << where;
            }
          }
      }
    }
  }
  simd::RestrictTargetForTest(0);
}

// An inf or NaN code in an FP8 E5M2 cache (nothing writes one, but a cache decode is given may hold one) reads
// as in a float cache: it reaches the rows that see its key and no other. Two sequences, 3 causal query rows and
// 2 query heads per K/V head; the code is at key 21 − 2 of sequence 1, K/V head 0, feature 5, which query rows 1
// and 2 of query heads 0 and 1 see. A NaN code in K makes their LSE and O NaN; an inf or a NaN code in V their
// feature 5 of O non-finite; every other element is bit for bit that of the clean cache. On every target, rows
// read straight and widened, per head, per tensor and per token, in groups (scaled as the rows are widened),
// contiguous and paged, 1 and 3 chunks; and the reference decode.
TEST(DecodeQuantized, E5M2InfAndNaNCodesReachOnlyTheRowsThatSeeThem) {
  constexpr std::int64_t kBatch = 1, kKey = 21 - 2, kHeadKv = 0, kFeature = 5;
  struct Format {
    std::int64_t d;
    ScaleGranularity granularity;
    std::int64_t group_size;
  };
  struct Injection {
    bool key;
    std::uint8_t code;
  };
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  for (const Format f : {Format{64, ScaleGranularity::kPerHead, 0}, Format{40, ScaleGranularity::kPerToken, 0},
                         Format{64, ScaleGranularity::kPerTensor, 0}, Format{64, ScaleGranularity::kPerToken, 8},
                         Format{64, ScaleGranularity::kPerToken, 32}})
    for (const std::int64_t page_size : {0, 4})
      for (const Injection injection : {Injection{true, 0x7e}, Injection{false, 0x7c}, Injection{false, 0xff}}) {
        const QuantShape shape{.Nq = 3, .Hq = 4, .Hkv = 2, .d = f.d, .Nmax = 40, .cached = {37, 21},
                               .element = CacheElement::kFp8E5M2, .granularity = f.granularity,
                               .group_size = f.group_size, .page_size = page_size};
        QuantCase clean(shape, 3), x(shape, 3);
        x.Code(injection.key, kBatch, kKey, kHeadKv, kFeature) = injection.code;
        const auto expect_reached_rows_only = [&](const Output& clean_out, const Output& out,
                                                  const std::string& where) {
          for (std::int64_t b = 0; b < 2; ++b)
            for (std::int64_t i = 0; i < 3; ++i)
              for (std::int64_t h = 0; h < 4; ++h) {
                const bool sees = b == kBatch && h / 2 == kHeadKv && i >= 1;
                const std::int64_t row = (b * 3 + i) * 4 + h, lse = (b * 4 + h) * 3 + i;
                const std::string at = where + ", row (b, i, h) = (" + std::to_string(b) + ", " + std::to_string(i) +
                                       ", " + std::to_string(h) + ")";
                for (std::int64_t e = 0; e < f.d; ++e) {
                  const float o = out.O[row * f.d + e];
                  if (sees && (injection.key || e == kFeature)) {
                    EXPECT_FALSE(std::isfinite(o)) << at << " feature " << e;
                    if (injection.key || injection.code != 0x7c) EXPECT_TRUE(std::isnan(o)) << at << " feature " << e;
                  } else {
                    ASSERT_EQ(std::bit_cast<std::uint32_t>(o),
                              std::bit_cast<std::uint32_t>(clean_out.O[row * f.d + e]))
                        << at << " feature " << e;
                  }
                }
                if (sees && injection.key) {
                  EXPECT_TRUE(std::isnan(out.lse[lse])) << at;
                } else {
                  EXPECT_EQ(std::bit_cast<std::uint32_t>(out.lse[lse]),
                            std::bit_cast<std::uint32_t>(clean_out.lse[lse]))
                      << at;
                }
              }
        };
        const std::string label = shape.ToString() + (injection.key ? " K" : " V") + " code " +
                                  std::to_string(int(injection.code));
        for (const std::int64_t splits : {1, 3}) {
          clean.params().num_splits = x.params().num_splits = splits;
          for (const std::int64_t target : targets) {
            simd::RestrictTargetForTest(target);
            expect_reached_rows_only(Attend(clean.params(), false), Attend(x.params(), false),
                                     label + " splits " + std::to_string(splits) + " on " + simd::TargetName(target));
          }
          simd::RestrictTargetForTest(0);
        }
        expect_reached_rows_only(Attend(clean.params(), true), Attend(x.params(), true), label + " reference");
      }
}

// q and o of any float type with any cache: within one rounding of the output type of the reference.
TEST(DecodeQuantized, QueriesOfAnyFloatTypeOverAnyCache) {
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
    for (const CacheElement element : kQuantizedElements) {
      QuantShape shape{.Nq = 3, .Hq = 6, .Hkv = 3, .d = 59, .Nmax = 97, .cached = {97, 20}, .dtype = dtype,
                       .element = element, .page_size = 5};
      QuantCase c(shape, 11);
      const double tolerance = dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2e-3 : 1.6e-2;
      EXPECT_LE(NormwiseError(Attend(c.params(), false), Attend(c.params(), true)), tolerance) << shape.ToString();
      // And over float caches of another float type than q's.
      for (const DType cache_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        DecodeParams p = c.OverFloats(true);
        std::vector<std::uint16_t> k(p.cache_strides.batch * (p.num_pages)), v(k.size());
        const std::int64_t elements = static_cast<std::int64_t>(k.size());
        if (cache_dtype != DType::kF32) {  // the originals rounded into a 16-bit cache
          for (std::int64_t n = 0; n < elements; ++n) {
            StoreFromFloat(k.data(), cache_dtype, n, static_cast<const float*>(p.k_cache)[n]);
            StoreFromFloat(v.data(), cache_dtype, n, static_cast<const float*>(p.v_cache)[n]);
          }
          p.k_cache = k.data(), p.v_cache = v.data(), p.cache_dtype = cache_dtype;
        }
        EXPECT_LE(NormwiseError(Attend(p, false), Attend(p, true)), tolerance)
            << to_string(dtype) << " q over a " << to_string(cache_dtype) << " cache";
      }
    }
}

// The append quantizes the new rows: each scale max|x| / qmax of its group (per token), each value within
// half a step of x; the reference decode stores the same bytes and the kernel's result agrees with it.
TEST(DecodeQuantized, AppendQuantizesTheNewRows) {
  for (const CacheElement element : kQuantizedElements)
    for (const std::int64_t group_size : {0, 16})
      for (const std::int64_t page_size : {0, 3}) {
        QuantShape shape{.Nq = 2, .Nnew = 3, .Hq = 4, .Hkv = 2, .d = 48, .Nmax = 40, .cached = {37, 0, 12},
                         .dtype = DType::kBF16, .element = element, .group_size = group_size,
                         .page_size = page_size};
        QuantCase fast(shape, 5), slow(shape, 5);
        // Row (b 1, new 0, hk 1): its first 16 features all zero, a group of scale 0 when grouped.
        for (std::int64_t e = 0; e < 16; ++e) StoreFromFloat(fast.k_new().data(), shape.dtype, (3 * 2 + 1) * 48 + e, 0.0f);
        for (std::int64_t e = 0; e < 16; ++e) StoreFromFloat(slow.k_new().data(), shape.dtype, (3 * 2 + 1) * 48 + e, 0.0f);
        const Output kernel = Attend(fast.params(), false);
        const Output reference = Attend(slow.params(), true);
        EXPECT_EQ(fast.CacheBytes(), slow.CacheBytes()) << shape.ToString();
        EXPECT_LE(NormwiseError(kernel, reference), 1.6e-2) << shape.ToString();
        const float qmax = QuantMax(element);
        for (std::int64_t b = 0; b < 3; ++b)
          for (std::int64_t i = 0; i < shape.Nnew; ++i)
            for (std::int64_t hk = 0; hk < shape.Hkv; ++hk) {
              const std::vector<float> k = fast.Row(true, b, shape.cached[b] + i, hk);
              const std::int64_t g = group_size > 0 ? group_size : shape.d;
              for (std::int64_t e0 = 0; e0 < shape.d; e0 += g) {
                float max_abs = 0.0f;
                std::vector<float> x(g);
                for (std::int64_t e = 0; e < g; ++e) {
                  x[e] = LoadAsFloat(fast.k_new().data(), shape.dtype, ((b * shape.Nnew + i) * shape.Hkv + hk) * shape.d + e0 + e);
                  max_abs = std::max(max_abs, std::fabs(x[e]));
                }
                const float scale = max_abs / qmax;
                for (std::int64_t e = 0; e < g; ++e) {
                  // half a step (int8's steps are the scale; FP8's at most 2⁻³ (E4M3) or 2⁻² (E5M2) of the
                  // value's binade, and the smallest subnormal below), plus the float32 roundings of x / scale
                  // and of scale·q
                  const double half_step = VisitQuantizedElement(element, [&](auto traits) {
                    return scale == 0.0f ? 0.0 : scale * decltype(traits)::MaxRoundingError(x[e] / scale);
                  });
                  EXPECT_NEAR(k[e0 + e], x[e], half_step + 2e-5 * scale) << shape.ToString() << " b" << b << " i" << i;
                }
              }
            }
      }
}

// Attention sinks over a quantized cache: the sink joins each row once, in the merge of the key chunks,
// whatever the cache holds. On every target and split count the kernel agrees with the float64 reference,
// and its LSE is the sink-free one plus the sink: log(e^{LSE} + e^{s_h}). A head with sink −∞ has none.
TEST(DecodeQuantized, SinksJoinEachRowOnceOverAQuantizedCache) {
  for (const CacheElement element : kQuantizedElements) {
    QuantShape shape{.Nq = 2, .Nnew = 1, .Hq = 4, .Hkv = 2, .d = 59, .Nmax = 97, .cached = {96, 13},
                     .element = element, .page_size = 5};
    const std::vector<float> sinks = {0.5f, -kInf, 2.0f, -1.25f};
    const std::vector<std::int64_t> targets =
        element == CacheElement::kInt8 ? Int8TargetsUnderTest() : TargetsUnderTest();
    for (const std::int64_t splits : {1, 3})
      for (const std::int64_t target : targets) {
        simd::RestrictTargetForTest(target);
        QuantCase without(shape, 3), with(shape, 3), reference(shape, 3);
        with.params().sinks = reference.params().sinks = sinks.data();
        with.params().num_splits = without.params().num_splits = splits;
        const Output plain = Attend(without.params(), false);
        const Output sunk = Attend(with.params(), false);
        EXPECT_LE(NormwiseError(sunk, Attend(reference.params(), true)), 2e-5)
            << shape.ToString() << " splits " << splits << " on " << simd::TargetName(target);
        const std::int64_t rows_per_head = shape.Nq;
        for (std::size_t n = 0; n < sunk.lse.size(); ++n) {
          const float sink = sinks[n / rows_per_head % shape.Hq];
          const double expected = sink == -kInf ? plain.lse[n] : std::log(std::exp(double(plain.lse[n])) + std::exp(double(sink)));
          EXPECT_NEAR(sunk.lse[n], expected, 1e-5) << shape.ToString() << " row " << n;
        }
      }
    simd::RestrictTargetForTest(0);
  }
}

// With integer scores (quantize_query_int8) the scores are exact int8 dot products of the cache and of the
// queries s·q rounded per scale group: against the float64 reference over the dequantized cache with q
// replaced by those rounded queries, only float32's error is left, on every target of the int8 kernel (its
// integer sums are the same on each), for tails (d 40, 59, 111), 1, 97 and 1025 keys, 1, 3, 5, 8 and 9 query
// rows per K/V head (AVX-512 VNNI takes them four at a time, two blocks of four at once), pages of 64 slots and
// three chunks.
TEST(DecodeQuantized, IntegerScoresAreThoseOfTheRoundedQueries) {
  const std::vector<std::int64_t> targets = Int8TargetsUnderTest();
  // (d, Nq, Hq) with Hkv = 2: R = Nq·Hq/2 rows per K/V head
  using Rows = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  for (const auto& [d, Nq, Hq] :
       std::initializer_list<Rows>{{40, 1, 6}, {59, 2, 8}, {111, 1, 10}, {128, 2, 8}, {256, 1, 2}, {40, 3, 6}})
    for (const std::int64_t group_size : {0, 8, 32})
      for (const std::int64_t page_size : {0, 64}) {
        if (group_size > 0 && d % group_size != 0) continue;
        QuantShape shape{.Nq = Nq, .Hq = Hq, .Hkv = 2, .d = d, .Nmax = 1025, .cached = {1025, 97, 1},
                         .group_size = group_size, .page_size = page_size};
        QuantCase c(shape, 17 + d);
        DecodeParams rounded = c.params();
        const float s = SoftmaxScale(rounded);
        const std::int64_t g = group_size > 0 ? group_size : d;
        std::vector<float> q(static_cast<const float*>(rounded.q),
                             static_cast<const float*>(rounded.q) + 3 * shape.Nq * shape.Hq * d);
        for (std::int64_t row = 0; row < static_cast<std::int64_t>(q.size()) / d; ++row) {
          std::vector<float> sq(d), scales(d / g);
          std::vector<std::uint8_t> bytes(d);
          for (std::int64_t e = 0; e < d; ++e) sq[e] = s * q[row * d + e];
          QuantizeRow(sq.data(), d, CacheElement::kInt8, ScaleGranularity::kPerToken, g, scales.data(), bytes.data());
          for (std::int64_t e = 0; e < d; ++e) {
            q[row * d + e] = static_cast<float>(double(scales[e / g]) * static_cast<std::int8_t>(bytes[e]) / s);
          }
        }
        rounded.q = q.data();
        const Output expected = Attend(rounded, true);
        c.params().quantize_query_int8 = true, c.params().num_splits = 3;
        for (const std::int64_t target : targets) {
          simd::RestrictTargetForTest(target);
          EXPECT_LE(NormwiseError(Attend(c.params(), false), expected), 1e-5)
              << shape.ToString() << " on " << simd::TargetName(target);
        }
        simd::RestrictTargetForTest(0);
      }
}

// The C API's quantized fields reach the same call: flashattn_decode over an int8 cache (with and without
// integer scores) and the fp8 ones, paged, writes O bit for bit as decode() does.
TEST(DecodeQuantized, TheCApiMakesTheSameCall) {
  for (const auto& [element, granularity, group, integer] :
       {std::tuple{CacheElement::kInt8, ScaleGranularity::kPerToken, 8, false},
        std::tuple{CacheElement::kInt8, ScaleGranularity::kPerToken, 0, true},
        std::tuple{CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0, false},
        std::tuple{CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0, false}}) {
    QuantShape shape{.Nq = 2, .Hq = 4, .Hkv = 2, .d = 40, .Nmax = 97, .cached = {97, 30}, .element = element,
                     .granularity = granularity, .group_size = group, .page_size = 16};
    QuantCase c(shape, 9);
    DecodeParams& p = c.params();
    p.quantize_query_int8 = integer, p.num_splits = 3, p.num_threads = 2;
    const Output cpp = Attend(p, false);

    flashattn_decode_params cp;
    flashattn_decode_params_init(&cp);
    cp.q = p.q, cp.k_cache = p.k_cache, cp.v_cache = p.v_cache;
    cp.cache_seqlens = p.cache_seqlens;
    cp.batch = p.batch, cp.seqlen_q = p.seqlen_q, cp.heads_q = p.heads_q, cp.heads_kv = p.heads_kv;
    cp.head_dim = p.head_dim, cp.score.causal = p.causal;
    cp.block_table = p.block_table, cp.block_table_stride = p.block_table_stride, cp.max_pages = p.max_pages;
    cp.num_pages = p.num_pages, cp.page_size = p.page_size;
    cp.num_splits = p.num_splits, cp.num_threads = p.num_threads;
    cp.cache_element = element == CacheElement::kInt8       ? FLASHATTN_CACHE_INT8
                       : element == CacheElement::kFp8E4M3 ? FLASHATTN_CACHE_FP8_E4M3
                                                           : FLASHATTN_CACHE_FP8_E5M2;
    cp.scale_granularity = granularity == ScaleGranularity::kPerToken ? FLASHATTN_SCALE_PER_TOKEN
                                                                      : FLASHATTN_SCALE_PER_HEAD;
    cp.k_scale = p.k_scale, cp.v_scale = p.v_scale, cp.scale_group_size = group;
    cp.quantize_query_int8 = integer;
    flashattn_decode_params_set_contiguous_strides(&cp);
    std::vector<float> o(cpp.O.size(), kNaN), lse(cpp.lse.size(), kNaN);
    cp.o = o.data(), cp.lse = lse.data();
    ASSERT_EQ(flashattn_decode(&cp), FLASHATTN_OK) << flashattn_last_error();
    EXPECT_EQ(std::memcmp(o.data(), cpp.O.data(), o.size() * sizeof(float)), 0) << shape.ToString();
    EXPECT_EQ(std::memcmp(lse.data(), cpp.lse.data(), lse.size() * sizeof(float)), 0) << shape.ToString();
  }
}

// quantize_query_int8 is for int8 caches: an fp8 or a float cache refuses it, naming the field.
TEST(DecodeQuantized, IntegerScoresRefuseOtherCaches) {
  for (const CacheElement element : {CacheElement::kFp8E4M3, CacheElement::kFp8E5M2, CacheElement::kFloat}) {
    QuantCase c(QuantShape{.element = element == CacheElement::kFloat ? CacheElement::kFp8E4M3 : element}, 1);
    DecodeParams p = element == CacheElement::kFloat ? c.OverFloats(true) : c.params();
    p.quantize_query_int8 = true;
    std::vector<float> o(p.batch * p.seqlen_q * p.heads_q * p.head_dim, 5.0f);
    p.o = o.data();
    try {
      decode(p);
      ADD_FAILURE() << "accepted " << to_string(element);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("quantize_query_int8 needs an int8 cache"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(to_string(element)), std::string::npos) << e.what();
    }
    EXPECT_EQ(o, std::vector<float>(o.size(), 5.0f));
  }
}

// V inside the quantized K cache (v_cache == k_cache) takes K's scales: another v_scale, or scale groups that do
// not divide head_dim_v, are refused with an Error naming the fields before anything is written, and so is a V
// cache of its own narrower than K's; a null v_scale reads K's.
TEST(DecodeQuantized, ValuesInsideTheKeysTakeKsScalesAndOthersTheHeadDim) {
  QuantShape shape{.Nnew = 2, .d = 64, .Nmax = 100, .cached = {90, 45}, .group_size = 16, .dv = 48};
  const auto expect_refused = [](DecodeParams p, const QuantCase& c, const std::string& field) {
    const std::vector<std::uint8_t> before = c.CacheBytes();
    std::vector<float> o(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim());
    p.o = o.data();
    try {
      decode(p);
      ADD_FAILURE() << "accepted " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.CacheBytes(), before) << field;
  };
  QuantCase c(shape, 1);
  DecodeParams other_scales = c.params();
  std::vector<float> v_scale(100 * 2 * 2 * 4, 1.0f);
  other_scales.v_scale = v_scale.data();
  expect_refused(other_scales, c, "v_scale must be null or k_scale");
  DecodeParams groups = c.params();
  groups.head_dim_v = 40;
  groups.set_contiguous_strides();
  expect_refused(groups, c, "scale_group_size=16 must divide head_dim_v=40");
  DecodeParams narrower = c.params();
  std::vector<std::uint8_t> v_cache(2 * 100 * 2 * 48);
  narrower.v_cache = v_cache.data(), narrower.v_new = c.k_new().data();  // a V cache of its own
  expect_refused(narrower, c, "head_dim_v=48 must equal head_dim=64");
  // V's scales given as null are K's too
  c.params().seqlen_new = 0;
  const Output with_k_scale = Attend(c.params(), false);
  c.params().v_scale = nullptr;
  const Output without = Attend(c.params(), false);
  EXPECT_EQ(without.O, with_k_scale.O);
  EXPECT_EQ(without.lse, with_k_scale.lse);
}

// Accuracy against the original (unquantized) values, Gaussian q, K, V: the NMSE of O, at 4096 keys (the
// program DecodeQuantizedFull below runs 32768). Bounds of the decode accuracy in docs/quantized_cache.md.
double NmseAgainstOriginal(CacheElement element, ScaleGranularity granularity, std::int64_t group_size,
                           std::int64_t keys, bool quantize_query = false, bool quantize_probs = false) {
  QuantShape shape{.Nq = 1, .Hq = 8, .Hkv = 2, .d = 128, .Nmax = keys, .cached = {static_cast<std::int32_t>(keys)},
                   .element = element, .granularity = granularity, .group_size = group_size};
  QuantCase c(shape, 1234);
  const Output original = Attend(c.OverFloats(true), true);
  c.params().quantize_query_int8 = quantize_query, c.params().quantize_probs_u8 = quantize_probs;
  return Nmse(Attend(c.params(), false), original);
}

TEST(DecodeQuantized, NmseAgainstTheOriginalValues) {
  const double int8_token = NmseAgainstOriginal(CacheElement::kInt8, ScaleGranularity::kPerToken, 0, 4096);
  const double int8_group = NmseAgainstOriginal(CacheElement::kInt8, ScaleGranularity::kPerToken, 32, 4096);
  const double fp8_head = NmseAgainstOriginal(CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0, 4096);
  const double e5m2_head = NmseAgainstOriginal(CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0, 4096);
  EXPECT_LE(int8_token, 2e-4);
  EXPECT_LE(int8_group, 1e-4);
  EXPECT_LE(fp8_head, 3e-3);
  EXPECT_LE(e5m2_head, 1.2e-2);
  EXPECT_LT(int8_group, int8_token);  // finer scales, smaller error
  EXPECT_LT(fp8_head, e5m2_head);     // more mantissa bits, smaller error
  EXPECT_GT(int8_token, 0.0);
  RecordProperty("nmse_int8_per_token", std::to_string(int8_token));
  RecordProperty("nmse_int8_group32", std::to_string(int8_group));
  RecordProperty("nmse_fp8_per_head", std::to_string(fp8_head));
  RecordProperty("nmse_fp8_e5m2_per_head", std::to_string(e5m2_head));
}

// FP8 E5M2 with per-head scales at 32768 keys: its NMSE is that of its rounding, which a NumPy model of the
// rounding puts at 5.9e-3 for these data (5.6e-3 to 6.8e-3 over draws; docs/quantized_cache.md): at most twice
// that, and not below half of it.
TEST(DecodeQuantized, E5M2NmseAt32768KeysIsThatOfItsRounding) {
  const double nmse = NmseAgainstOriginal(CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0, 32768);
  EXPECT_LE(nmse, 1.2e-2);
  EXPECT_GE(nmse, 3e-3);
  std::printf("NMSE fp8 e5m2 per head, 32768 keys: %.3g\n", nmse);
  RecordProperty("nmse_fp8_e5m2_per_head_32768", std::to_string(nmse));
}

// Integer scores add q's rounding to the cache's, integer P̃V (per-token scales only) the weights': each option
// and both together stay within the cache's bounds, and each adds to the error. (The scores are the same on
// every target, IntegerScoresAreThoseOfTheRoundedQueries checks each, as the IntegerPv tests do for P̃V; this
// runs the dispatched one.)
TEST(DecodeQuantized, NmseAgainstTheOriginalValuesWithIntegerOptions) {
  const double per_token = NmseAgainstOriginal(CacheElement::kInt8, ScaleGranularity::kPerToken, 0, 4096);
  const double group32 = NmseAgainstOriginal(CacheElement::kInt8, ScaleGranularity::kPerToken, 32, 4096);
  for (const auto& [name, group, integer_scores, integer_pv, bound] :
       {std::tuple{"per_token_integer_scores", 0, true, false, 2e-4},
        std::tuple{"group32_integer_scores", 32, true, false, 1e-4},
        std::tuple{"per_token_integer_pv", 0, false, true, 2e-4},
        std::tuple{"per_token_integer_scores_and_pv", 0, true, true, 2e-4}}) {
    const double nmse = NmseAgainstOriginal(CacheElement::kInt8, ScaleGranularity::kPerToken, group, 4096,
                                            integer_scores, integer_pv);
    EXPECT_LE(nmse, bound) << name;
    EXPECT_GT(nmse, group == 0 ? per_token : group32) << name << ": the rounding adds to the error";
    RecordProperty(std::string("nmse_int8_") + name, std::to_string(nmse));
  }
}

// A V scale that is NaN, infinite or negative cannot be rounded into u8 weights: with integer P̃V the rows that
// see its key get NaN (never a silently wrong output), the other rows are as without it, on every target.
TEST(DecodeQuantized, IntegerPvGivesNaNForAVScaleItCannotRound) {
  for (const float bad : {kNaN, kInf, -1.0f})
    for (const std::int64_t target : Int8TargetsUnderTest()) {
      QuantShape shape{.Nq = 1, .Hq = 4, .Hkv = 2, .d = 64, .Nmax = 100, .cached = {100, 45}};
      QuantCase c(shape, 5);
      c.params().quantize_probs_u8 = true;
      simd::RestrictTargetForTest(target);
      const Output before = Attend(c.params(), false);
      c.params().v_scale[(0 * shape.Nmax + 30) * shape.Hkv + 1] = bad;  // batch 0, key 30, K/V head 1
      const Output out = Attend(c.params(), false);
      simd::RestrictTargetForTest(0);
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t h = 0; h < shape.Hq; ++h)
          for (std::int64_t e = 0; e < shape.d; ++e) {
            const std::size_t n = static_cast<std::size_t>((b * shape.Hq + h) * shape.d + e);
            const std::string where = "scale " + std::to_string(bad) + " on " + simd::TargetName(target) +
                                      ", batch " + std::to_string(b) + " head " + std::to_string(h);
            if (b == 0 && h / 2 == 1) EXPECT_TRUE(std::isnan(out.O[n])) << where;
            else EXPECT_EQ(out.O[n], before.O[n]) << where;
          }
    }
}

// Integer P̃ V on every target: each computes the same exact sums of the rounded weights, but the weights come
// from its own float32 softmax, so a weight's rounding may tip over by one ulp of P̃. Against the first target:
// within float32's error and such a rare tip; against the float64 reference without rounding: within the
// rounding's. Tails (d 40, 59, 111), 1, 97 and 1025 keys, rows per K/V head 4, 5 and 8 (row tiles of 4 and 1),
// a causal pair of query rows, pages of 64 slots, three chunks, with and without integer scores.
TEST(DecodeQuantized, IntegerPvAgreesOnEveryTarget) {
  const std::vector<std::int64_t> targets = Int8TargetsUnderTest();
  ASSERT_GE(targets.size(), 2u);
  double worst = 0.0, worst_rounding = 0.0;
  for (const std::int64_t d : {40, 59, 111, 128, 256})
    for (const std::int64_t Hq : {8, 10, 16})
      for (const std::int64_t page_size : {0, 64})
        for (const bool integer_scores : {false, true}) {
          QuantShape shape{.Nq = 2, .Hq = Hq, .Hkv = 2, .d = d, .Nmax = 1025, .cached = {1025, 97, 1},
                           .page_size = page_size};
          QuantCase c(shape, 31 + d + Hq);
          const Output unrounded = Attend(c.OverFloats(false), true);
          c.params().quantize_probs_u8 = true, c.params().quantize_query_int8 = integer_scores;
          c.params().num_splits = 3;
          const auto where = [&](std::int64_t target) {
            return shape.ToString() + (integer_scores ? " integer scores" : "") + " on " + simd::TargetName(target);
          };
          simd::RestrictTargetForTest(targets.front());
          const Output first = Attend(c.params(), false);
          const double first_rounding = NormwiseError(first, unrounded);
          EXPECT_LE(first_rounding, 2e-2) << where(targets.front());
          worst_rounding = std::max(worst_rounding, first_rounding);
          for (std::size_t i = 1; i < targets.size(); ++i) {  // each other target against the first
            simd::RestrictTargetForTest(targets[i]);
            const Output out = Attend(c.params(), false);
            const double error = NormwiseError(out, first), rounding = NormwiseError(out, unrounded);
            // a tipped weight moves O by max w / 255 · |v| / l: 2e-4 here
            EXPECT_LE(error, 5e-4) << where(targets[i]) << " against " << simd::TargetName(targets.front());
            EXPECT_LE(rounding, 2e-2) << where(targets[i]);
            worst = std::max(worst, error), worst_rounding = std::max(worst_rounding, rounding);
          }
          simd::RestrictTargetForTest(0);
        }
  RecordProperty("worst_between_targets", std::to_string(worst));
  RecordProperty("worst_against_unrounded", std::to_string(worst_rounding));
}

// The rounding integer P̃ V performs, in float64: for each query row (one per sequence and head, seeing every
// cached key), in blocks of 32 keys from the first (one chunk), u_c = round(255·w_c / max w) of the weights
// w_c = e^{s_c − max s}·v_scale_c, then O = Σ_blocks (max w / 255)·Σ_c u_c·v_c / Σ_c e^{s_c − max s} with the
// cache's int8 values v_c.
Output RoundedWeightsModel(QuantCase& c) {
  const DecodeParams& p = c.params();
  const std::int64_t d = p.head_dim, group = p.heads_q / p.heads_kv;
  const double s = SoftmaxScale(p);
  Output out{std::vector<float>(p.batch * p.heads_q * d), std::vector<float>(p.batch * p.heads_q)};
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t n = p.cache_seqlens[b];
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::int64_t hk = h / group;
      std::vector<double> score(n), weight(n);
      std::vector<std::vector<double>> v(n);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::vector<float> k = c.Row(true, b, j, hk), v_row = c.Row(false, b, j, hk);
        double dot = 0.0;
        for (std::int64_t e = 0; e < d; ++e) {
          dot += LoadAsFloat(p.q, p.dtype, (b * p.heads_q + h) * d + e) * double(k[e]);
        }
        score[j] = s * dot;
        const float v_scale = c.RowScale(false, b, j, hk);
        v[j].resize(d);
        for (std::int64_t e = 0; e < d; ++e) v[j][e] = v_scale == 0.0f ? 0.0 : std::nearbyint(v_row[e] / v_scale);
        weight[j] = v_scale;
      }
      const double max_score = *std::max_element(score.begin(), score.end());
      double l = 0.0;
      std::vector<double> o(d, 0.0);
      for (std::int64_t j = 0; j < n; ++j) {
        l += std::exp(score[j] - max_score);
        weight[j] *= std::exp(score[j] - max_score);
      }
      for (std::int64_t j0 = 0; j0 < n; j0 += 32) {
        const std::int64_t j1 = std::min(n, j0 + 32);
        const double max_w = *std::max_element(weight.begin() + j0, weight.begin() + j1);
        if (max_w == 0.0) continue;
        for (std::int64_t j = j0; j < j1; ++j) {
          const double u = std::nearbyint(255.0 * weight[j] / max_w);
          for (std::int64_t e = 0; e < d; ++e) o[e] += max_w / 255.0 * u * v[j][e];
        }
      }
      for (std::int64_t e = 0; e < d; ++e) out.O[(b * p.heads_q + h) * d + e] = static_cast<float>(o[e] / l);
      out.lse[b * p.heads_q + h] = static_cast<float>(max_score + std::log(l));
    }
  }
  return out;
}

// Integer P̃ V computes what its rounding says, on every target: against the float64 model of that rounding its
// error is float32's (and a rare weight whose rounding a float32 ulp tips over), several times below the model's
// distance from the float64 reference without the rounding; the LSE is the reference's. Tails, GQA and MQA,
// pages, one chunk.
TEST(DecodeQuantized, IntegerPvIsTheRoundingItDescribes) {
  for (const std::int64_t d : {40, 59, 111, 128})
    for (const std::int64_t page_size : {0, 64}) {
      QuantShape shape{.Nq = 1, .Hq = 8, .Hkv = d == 128 ? 1 : 2, .d = d, .Nmax = 1025, .cached = {1025, 97, 1},
                       .page_size = page_size};
      QuantCase c(shape, 7 + d);
      c.params().num_splits = 1;
      const Output unrounded = Attend(c.OverFloats(false), true);
      c.params().quantize_probs_u8 = true;
      const Output model = RoundedWeightsModel(c);
      const double rounding = NormwiseError(model, unrounded);
      for (const std::int64_t target : Int8TargetsUnderTest()) {
        simd::RestrictTargetForTest(target);
        const Output out = Attend(c.params(), false);
        const std::string where = shape.ToString() + " on " + simd::TargetName(target);
        const double error = NormwiseError(out, model);
        EXPECT_LE(error, 1e-4) << where;
        EXPECT_GE(rounding, 5 * error) << where;
        for (std::size_t n = 0; n < out.lse.size(); ++n) EXPECT_NEAR(out.lse[n], unrounded.lse[n], 1e-5) << where;
        std::printf("%s: %.3g from the model, which is %.3g from the unrounded reference\n", where.c_str(), error,
                    rounding);
      }
      simd::RestrictTargetForTest(0);
    }
}

// The benchmark shape of docs/quantized_cache.md: run with --gtest_also_run_disabled_tests to print the figures.
TEST(DecodeQuantized, DISABLED_NmseAt32768Keys) {
  for (const auto& [name, element, granularity, group] :
       {std::tuple{"int8 per token", CacheElement::kInt8, ScaleGranularity::kPerToken, 0},
        std::tuple{"int8 g=32", CacheElement::kInt8, ScaleGranularity::kPerToken, 32},
        std::tuple{"fp8 e4m3 per head", CacheElement::kFp8E4M3, ScaleGranularity::kPerHead, 0},
        std::tuple{"fp8 e4m3 per tensor", CacheElement::kFp8E4M3, ScaleGranularity::kPerTensor, 0},
        std::tuple{"fp8 e5m2 per head", CacheElement::kFp8E5M2, ScaleGranularity::kPerHead, 0},
        std::tuple{"fp8 e5m2 per tensor", CacheElement::kFp8E5M2, ScaleGranularity::kPerTensor, 0}}) {
    std::printf("NMSE %-20s %.3g\n", name, NmseAgainstOriginal(element, granularity, group, 32768));
    if (element == CacheElement::kInt8) {
      std::printf("NMSE %-20s %.3g with integer scores\n", name,
                  NmseAgainstOriginal(element, granularity, group, 32768, true));
    }
    if (element == CacheElement::kInt8 && group == 0) {
      std::printf("NMSE %-20s %.3g with integer P̃V, %.3g with integer scores and P̃V\n", name,
                  NmseAgainstOriginal(element, granularity, group, 32768, false, true),
                  NmseAgainstOriginal(element, granularity, group, 32768, true, true));
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
