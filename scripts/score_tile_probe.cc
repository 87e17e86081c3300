// What the int8 score tiles of decode cost when nothing waits on main memory (docs/quantized_cache.md, "What
// limits the bandwidth"): the scores of 4 query rows per K/V head against one block of keys (32 keys of 8 K/V
// heads, d = 128, int8 q and k, exact int32 dot products converted to float), one thread, best of 15 trials of
// 20000 blocks; prints nanoseconds per (key, K/V head).
//
//   g++ -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni scripts/score_tile_probe.cc -o /tmp/stp
//   /tmp/stp
//
// Two layouts of the K rows:
//   rows      the cache's own (seq, head, dim) rows, as the kernel reads them: tiles of 4 rows × 4 keys, each
//             dot product a vector of 16 int32 partial sums that a transposing shuffle tree reduces (the
//             kernel's IntegerDotTile and ReduceTransposed written out with plain intrinsics), with the K
//             block in L1, or cycling through 24 blocks (768 KiB, in L2) or 256 (8 MiB, in L3)
//   in lanes  16 keys' rows interleaved by 4-byte groups (a layout the cache does not have): lane i of vector j
//             holds bytes 4j … 4j + 3 of key i, so each vpdpbusd multiplies 16 keys by one broadcast group of q
//             and the scores come out in lanes, with no reduction (K in L1)
// Both compute the same integers, checked against a scalar loop. Nothing here uses flashattn.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kHeads = 8, kRows = 4, kKeys = 32, kDim = 128;

// vpdpbusd: acc += Σ over each lane's 4 bytes of u (unsigned) × s (signed). Assembly, as in the kernel.
inline __attribute__((always_inline)) __m512i DotBytes(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// Lane i of the result: within each 128-bit block, the sum over the block of a, b, c, d (i = 0 … 3).
inline __attribute__((always_inline)) __m512i SumsWithinBlocks(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

// Lane i: the sum of the lanes of v[i].
inline __attribute__((always_inline)) __m512i ReduceTransposed16(const __m512i* v) {
  const __m512i w0 = SumsWithinBlocks(v[0], v[1], v[2], v[3]), w1 = SumsWithinBlocks(v[4], v[5], v[6], v[7]);
  const __m512i w2 = SumsWithinBlocks(v[8], v[9], v[10], v[11]), w3 = SumsWithinBlocks(v[12], v[13], v[14], v[15]);
  const __m512i x0 = _mm512_add_epi32(_mm512_shuffle_i32x4(w0, w1, 0x44), _mm512_shuffle_i32x4(w0, w1, 0xEE));
  const __m512i x1 = _mm512_add_epi32(_mm512_shuffle_i32x4(w2, w3, 0x44), _mm512_shuffle_i32x4(w2, w3, 0xEE));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x0, x1, 0x88), _mm512_shuffle_i32x4(x0, x1, 0xDD));
}

// S[h][r][c] for the cache's rows: K + (c·kHeads + h)·kDim is key c's row of head h. k is offset to unsigned
// bytes by flipping its top bit; each accumulator starts at lanes[h·kRows + r], whose lanes sum to −128·Σq.
__attribute__((noinline)) void ScoresFromRows(const std::int8_t* q, const std::int8_t* K, const __m512i* lanes,
                                              float* S) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int g0 = 0; g0 < kKeys; g0 += 16) {
    for (int h = 0; h < kHeads; ++h) {
      for (int c0 = g0; c0 < g0 + 16; c0 += 4) {
        __m512i acc[16];
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) acc[r * 4 + c] = lanes[h * kRows + r];
        }
        for (int e = 0; e < kDim; e += 64) {
          __m512i k[4];
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            k[c] = _mm512_xor_si512(_mm512_loadu_si512(K + ((c0 + c) * kHeads + h) * kDim + e), flip);
          }
#pragma GCC unroll 4
          for (int r = 0; r < kRows; ++r) {
            const __m512i qr = _mm512_loadu_si512(q + (h * kRows + r) * kDim + e);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) acc[r * 4 + c] = DotBytes(acc[r * 4 + c], k[c], qr);
          }
        }
        const __m512 dots = _mm512_cvtepi32_ps(ReduceTransposed16(acc));  // lane 4r + c
        float* S_h = S + h * kRows * kKeys + c0;
        _mm_storeu_ps(S_h, _mm512_castps512_ps128(dots));
        _mm_storeu_ps(S_h + kKeys, _mm512_extractf32x4_ps(dots, 1));
        _mm_storeu_ps(S_h + 2 * kKeys, _mm512_extractf32x4_ps(dots, 2));
        _mm_storeu_ps(S_h + 3 * kKeys, _mm512_extractf32x4_ps(dots, 3));
      }
    }
  }
}

// The same scores from keys in lanes: Kp + ((g·kHeads + h)·(kDim / 4) + j)·64 is the vector of byte group j of
// keys 16g … 16g + 15, head h. Two accumulators per row (even and odd groups) keep two chains per row.
__attribute__((noinline)) void ScoresFromLanes(const std::int8_t* q, const std::int8_t* Kp,
                                               const std::int32_t* offset, float* S) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < kKeys / 16; ++g) {
    for (int h = 0; h < kHeads; ++h) {
      __m512i acc[kRows][2];
      for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
      const std::int8_t* k_vectors = Kp + (g * kHeads + h) * (kDim / 4) * 64;
      for (int j = 0; j < kDim / 4; j += 2) {
        const __m512i k0 = _mm512_xor_si512(_mm512_loadu_si512(k_vectors + j * 64), flip);
        const __m512i k1 = _mm512_xor_si512(_mm512_loadu_si512(k_vectors + j * 64 + 64), flip);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          std::int32_t group[2];
          __builtin_memcpy(group, q + (h * kRows + r) * kDim + 4 * j, 8);
          acc[r][0] = DotBytes(acc[r][0], k0, _mm512_set1_epi32(group[0]));
          acc[r][1] = DotBytes(acc[r][1], k1, _mm512_set1_epi32(group[1]));
        }
      }
      for (int r = 0; r < kRows; ++r) {
        const __m512i dots = _mm512_add_epi32(acc[r][0], acc[r][1]);
        const __m512i sum = _mm512_add_epi32(dots, _mm512_set1_epi32(offset[h * kRows + r]));
        _mm512_storeu_ps(S + (h * kRows + r) * kKeys + 16 * g, _mm512_cvtepi32_ps(sum));
      }
    }
  }
}

template <class Scores>
double BestNanosecondsPerKeyHead(const Scores& scores) {
  constexpr int kCalls = 20000;
  double best = 1e30;
  for (int trial = 0; trial < 15; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) {
      scores();
      asm volatile("" ::: "memory");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, seconds * 1e9 / kCalls / (kKeys * kHeads));
  }
  return best;
}

}  // namespace

int main() {
  constexpr std::size_t kBlockBytes = std::size_t{kKeys} * kHeads * kDim;
  constexpr int kMaxBlocks = 256;
  alignas(64) static std::int8_t q[kHeads * kRows * kDim], Kp[kBlockBytes];
  auto* K = static_cast<std::int8_t*>(std::aligned_alloc(64, kBlockBytes * kMaxBlocks));
  alignas(64) static std::int32_t offset[kHeads * kRows];
  alignas(64) static float S_rows[kHeads * kRows * kKeys], S_lanes[kHeads * kRows * kKeys];
  static __m512i lanes[kHeads * kRows];
  std::srand(1);
  for (auto& x : q) x = static_cast<std::int8_t>(std::rand() % 255 - 127);
  for (std::size_t i = 0; i < kBlockBytes; ++i) K[i] = static_cast<std::int8_t>(std::rand() % 255 - 127);
  for (int b = 1; b < kMaxBlocks; ++b) std::copy(K, K + kBlockBytes, K + b * kBlockBytes);
  for (int i = 0; i < kHeads * kRows; ++i) {
    std::int32_t sum = 0;
    alignas(64) std::int32_t lane_sums[16] = {};
    for (int e = 0; e < kDim; ++e) {
      sum += q[i * kDim + e];
      lane_sums[(e % 64) / 4] -= 128 * q[i * kDim + e];
    }
    offset[i] = -128 * sum;
    lanes[i] = _mm512_load_si512(lane_sums);
  }
  for (int c = 0; c < kKeys; ++c) {  // key c, head h, byte e → group c / 16, vector e / 4, lane c % 16, byte e % 4
    for (int h = 0; h < kHeads; ++h) {
      for (int e = 0; e < kDim; ++e) {
        Kp[(((c / 16) * kHeads + h) * (kDim / 4) + e / 4) * 64 + (c % 16) * 4 + e % 4] = K[(c * kHeads + h) * kDim + e];
      }
    }
  }
  ScoresFromRows(q, K, lanes, S_rows);
  ScoresFromLanes(q, Kp, offset, S_lanes);
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kKeys; ++c) {
        std::int32_t dot = 0;
        for (int e = 0; e < kDim; ++e) dot += q[(h * kRows + r) * kDim + e] * K[(c * kHeads + h) * kDim + e];
        const int i = (h * kRows + r) * kKeys + c;
        if (S_rows[i] != static_cast<float>(dot) || S_lanes[i] != static_cast<float>(dot)) {
          std::printf("mismatch at head %d row %d key %d: %g %g, exact %d\n", h, r, c, S_rows[i], S_lanes[i], dot);
          return 1;
        }
      }
    }
  }
  for (const int blocks : {1, 24, 256}) {
    int next = 0;
    const double ns = BestNanosecondsPerKeyHead(
        [&] { ScoresFromRows(q, K + (next++ % blocks) * kBlockBytes, lanes, S_rows); });
    std::printf("rows, %3d K block%s (%4zu KiB): %.2f ns per key-head\n", blocks, blocks == 1 ? " " : "s",
                blocks * kBlockBytes / 1024, ns);
  }
  std::printf("in lanes, 1 K block  (  32 KiB): %.2f ns per key-head\n",
              BestNanosecondsPerKeyHead([&] { ScoresFromLanes(q, Kp, offset, S_lanes); }));
  std::free(K);
  return 0;
}
