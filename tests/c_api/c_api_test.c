/* The C API (include/flashattn/c_api.h) from C: every entry point against a plain double-precision reference
 * or against another entry point, and every entry point's errors (status, message naming the argument,
 * outputs untouched). Built with `pkg-config --cflags --libs flashattn` against an installed copy by
 * run_c_api.cmake; usage: c_api_test EXPECTED_VERSION. Prints each failed check and exits non-zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "flashattn/c_api.h"

static int failures = 0;

#define CHECK(condition, ...)                                  \
  do {                                                         \
    if (!(condition)) {                                        \
      ++failures;                                              \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #condition); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
    }                                                          \
  } while (0)

/* ------------------------------------------------------------------------------------------------------ */
/* Data: values that are multiples of 1/16 in [-1, 1], exact in float16 and bfloat16. */

static uint32_t rng_state = 12345;

static float random_value(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((int)(rng_state >> 24) % 33 - 16) / 16.0f;
}

static float* random_array(size_t n) {
  float* x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) x[i] = random_value();
  return x;
}

static float* filled_array(size_t n, float value) {
  float* x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) x[i] = value;
  return x;
}

static uint32_t float_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

static float bits_float(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* Float to and from the 16-bit types, for zero and normal numbers (all this test uses); bf16 rounds to
 * nearest even, f16 converts exactly representable inputs only. */
static uint16_t to_half(float x, flashattn_dtype dtype) {
  const uint32_t bits = float_bits(x);
  if (dtype == FLASHATTN_DTYPE_BF16) return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  if ((bits & 0x7fffffffu) == 0) return (uint16_t)(bits >> 16);
  const uint32_t exponent = ((bits >> 23) & 0xffu) - 127u + 15u;
  return (uint16_t)(((bits >> 16) & 0x8000u) | (exponent << 10) | ((bits >> 13) & 0x3ffu));
}

static float from_half(uint16_t h, flashattn_dtype dtype) {
  if (dtype == FLASHATTN_DTYPE_BF16) return bits_float((uint32_t)h << 16);
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  if ((h & 0x7fffu) == 0) return bits_float(sign);
  const uint32_t exponent = ((h >> 10) & 0x1fu) - 15u + 127u;
  return bits_float(sign | (exponent << 23) | ((uint32_t)(h & 0x3ffu) << 13));
}

/* The data of `x` in `dtype`: a copy for the 16-bit types. */
static void* as_dtype(const float* x, size_t n, flashattn_dtype dtype) {
  if (dtype == FLASHATTN_DTYPE_F32) {
    float* copy = malloc(n * sizeof(float));
    memcpy(copy, x, n * sizeof(float));
    return copy;
  }
  uint16_t* h = malloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) h[i] = to_half(x[i], dtype);
  return h;
}

static float element(const void* data, size_t i, flashattn_dtype dtype) {
  return dtype == FLASHATTN_DTYPE_F32 ? ((const float*)data)[i] : from_half(((const uint16_t*)data)[i], dtype);
}

static double max_difference(const void* actual, const float* expected, size_t n, flashattn_dtype dtype) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = expected[i], a = element(actual, i, dtype);
    const double diff = (isinf(e) && a == e) ? 0.0 : fabs(a - e);
    if (!(diff <= worst)) worst = diff; /* NaN counts as the worst */
  }
  return worst;
}

static int all_equal(const float* x, size_t n, float value) {
  for (size_t i = 0; i < n; ++i)
    if (x[i] != value) return 0;
  return 1;
}

/* ------------------------------------------------------------------------------------------------------ */
/* The reference: O = softmax(s·QKᵀ [softcap] + ALiBi + mask, masked) V in double, contiguous (b, s, h, d)
 * tensors, the modifiers of `p` (ALiBi slopes per head; mask tensors contiguous (batch, Hq, Nq, Nk) or
 * broadcast over the batch by stride_batch 0), dropout by `keep` (or none if NULL). P is written to `probs`
 * (batch, Hq, Nq, Nk) if given, before dropout. */
static void reference_forward(const flashattn_attention_params* p, const float* q, const float* k,
                              const float* v, float* o, float* lse, const uint8_t* keep, double* probs) {
  const int64_t B = p->batch, Nq = p->seqlen_q, Nk = p->seqlen_k, Hq = p->heads_q, Hkv = p->heads_kv;
  const int64_t d = p->head_dim, dv = p->head_dim_v ? p->head_dim_v : d;
  const flashattn_score_settings* sc = &p->score;
  const double scale = sc->has_scale ? sc->scale : 1.0 / sqrt((double)d);
  double* s = malloc((size_t)Nk * sizeof(double));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t hk = h / (Hq / Hkv), diagonal = i + Nk - Nq;
        double max = -INFINITY;
        for (int64_t j = 0; j < Nk; ++j) {
          double x = 0.0;
          for (int64_t c = 0; c < d; ++c) x += (double)q[((b * Nq + i) * Hq + h) * d + c] * k[((b * Nk + j) * Hkv + hk) * d + c];
          x *= scale;
          if (sc->softcap > 0) x = sc->softcap * tanh(x / sc->softcap);
          if (sc->alibi_slopes) x -= sc->alibi_slopes[h] * fabs((double)(diagonal - j));
          const int64_t m = b * p->mask.stride_batch + h * p->mask.stride_head + i * p->mask.stride_row + j;
          if (p->mask.kind == FLASHATTN_MASK_ADDITIVE) x += ((const float*)p->mask.data)[m];
          if (p->mask.kind == FLASHATTN_MASK_BOOL && !((const uint8_t*)p->mask.data)[m]) x = -INFINITY;
          if (sc->causal && j > diagonal) x = -INFINITY;
          if (sc->window_left >= 0 && j < diagonal - sc->window_left) x = -INFINITY;
          if (sc->window_right >= 0 && j > diagonal + sc->window_right) x = -INFINITY;
          s[j] = x;
          if (x > max) max = x;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < Nk; ++j) sum += max == -INFINITY ? 0.0 : exp(s[j] - max);
        const double row_lse = sum > 0 ? max + log(sum) : -INFINITY;
        if (lse) lse[(b * Hq + h) * Nq + i] = (float)row_lse;
        for (int64_t c = 0; c < dv; ++c) o[((b * Nq + i) * Hq + h) * dv + c] = 0.0f;
        for (int64_t j = 0; j < Nk; ++j) {
          const int64_t pj = ((b * Hq + h) * Nq + i) * Nk + j;
          double weight = row_lse == -INFINITY ? 0.0 : exp(s[j] - row_lse);
          if (probs) probs[pj] = weight;
          if (keep) weight = keep[pj] ? weight / (1.0 - p->dropout_p) : 0.0;
          for (int64_t c = 0; c < dv; ++c)
            o[((b * Nq + i) * Hq + h) * dv + c] += (float)(weight * v[((b * Nk + j) * Hkv + hk) * dv + c]);
        }
      }
  free(s);
}

/* A problem: sizes, its contiguous float data, and a params struct of the C API pointing at the data. */
typedef struct problem {
  flashattn_attention_params params;
  float *q, *k, *v, *o, *lse;
  size_t nq, nk, nv, no, nlse;
} problem;

static problem make_problem(int64_t batch, int64_t nq, int64_t nk, int64_t hq, int64_t hkv, int64_t d,
                            int64_t dv) {
  problem pr;
  flashattn_attention_params_init(&pr.params);
  flashattn_attention_params* p = &pr.params;
  p->batch = batch, p->seqlen_q = nq, p->seqlen_k = nk, p->heads_q = hq, p->heads_kv = hkv;
  p->head_dim = d, p->head_dim_v = dv;
  pr.nq = (size_t)(batch * nq * hq * d), pr.nk = (size_t)(batch * nk * hkv * d);
  pr.nv = (size_t)(batch * nk * hkv * dv), pr.no = (size_t)(batch * nq * hq * dv);
  pr.nlse = (size_t)(batch * hq * nq);
  pr.q = random_array(pr.nq), pr.k = random_array(pr.nk), pr.v = random_array(pr.nv);
  pr.o = filled_array(pr.no, 7.0f), pr.lse = filled_array(pr.nlse, 7.0f);
  p->q = pr.q, p->k = pr.k, p->v = pr.v, p->o = pr.o, p->lse = pr.lse;
  flashattn_attention_params_set_contiguous_strides(p);
  return pr;
}

static void free_problem(problem* pr) {
  free(pr->q), free(pr->k), free(pr->v), free(pr->o), free(pr->lse);
}

/* (b, s, h, c) → (b, h, s, c) of a contiguous tensor. */
static float* to_head_major(const float* x, int64_t b_, int64_t s_, int64_t h_, int64_t c_) {
  float* y = malloc((size_t)(b_ * s_ * h_ * c_) * sizeof(float));
  for (int64_t b = 0; b < b_; ++b)
    for (int64_t s = 0; s < s_; ++s)
      for (int64_t h = 0; h < h_; ++h)
        for (int64_t c = 0; c < c_; ++c) y[((b * h_ + h) * s_ + s) * c_ + c] = x[((b * s_ + s) * h_ + h) * c_ + c];
  return y;
}

/* ------------------------------------------------------------------------------------------------------ */
/* forward */

typedef struct forward_case {
  const char* name;
  int64_t batch, nq, nk, hq, hkv, d, dv;
  bool causal;
  int64_t window_left, window_right;
  float softcap;
  bool alibi;
  flashattn_mask_kind mask;
  float dropout_p;
  flashattn_dtype dtype;
  bool head_major;
  flashattn_algorithm algorithm;
  double tolerance;
} forward_case;

static void test_forward_case(const forward_case* fc) {
  problem pr = make_problem(fc->batch, fc->nq, fc->nk, fc->hq, fc->hkv, fc->d, fc->dv);
  flashattn_attention_params* p = &pr.params;
  p->score.causal = fc->causal, p->score.window_left = fc->window_left, p->score.window_right = fc->window_right;
  p->score.softcap = fc->softcap, p->dtype = fc->dtype, p->num_threads = 2;
  float* slopes = random_array((size_t)fc->hq);
  for (int64_t h = 0; h < fc->hq; ++h) slopes[h] = 0.25f * (float)(h + 1);
  if (fc->alibi) p->score.alibi_slopes = slopes;
  const size_t mask_size = (size_t)(fc->hq * fc->nq * fc->nk);
  void* mask = NULL;
  if (fc->mask != FLASHATTN_MASK_NONE) {
    /* One mask for every batch entry (stride_batch 0); masks out about a third of the keys. */
    p->mask.kind = fc->mask, p->mask.stride_batch = 0, p->mask.stride_head = fc->nq * fc->nk;
    p->mask.stride_row = fc->nk, p->mask.stride_col = 1;
    if (fc->mask == FLASHATTN_MASK_BOOL) {
      uint8_t* m = malloc(mask_size);
      for (size_t n = 0; n < mask_size; ++n) m[n] = n % 3 != 1;
      mask = m;
    } else {
      float* m = random_array(mask_size);
      for (size_t n = 0; n < mask_size; ++n) m[n] = n % 5 == 2 ? -INFINITY : m[n];
      mask = m;
    }
    p->mask.data = mask;
  }
  uint8_t* keep = NULL;
  if (fc->dropout_p > 0) {
    p->dropout_p = fc->dropout_p, p->dropout_seed = 42, p->dropout_offset = 7;
    const size_t n = (size_t)fc->batch * mask_size;
    keep = malloc(n);
    CHECK(flashattn_materialize_dropout_mask(p, keep) == FLASHATTN_OK, "%s: %s", fc->name, flashattn_last_error());
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) kept += keep[i];
    CHECK(kept > 0.6 * n && kept < 0.8 * n, "%s: %zu of %zu kept at p=%g", fc->name, kept, n, fc->dropout_p);
  }

  float* expected = malloc(pr.no * sizeof(float));
  float* expected_lse = malloc(pr.nlse * sizeof(float));
  reference_forward(p, pr.q, pr.k, pr.v, expected, expected_lse, keep, NULL);

  /* The library's inputs: the element type, and the layout. */
  const float *q = pr.q, *k = pr.k, *v = pr.v;
  float *q_t = NULL, *k_t = NULL, *v_t = NULL;
  if (fc->head_major) {
    q = q_t = to_head_major(pr.q, fc->batch, fc->nq, fc->hq, fc->d);
    k = k_t = to_head_major(pr.k, fc->batch, fc->nk, fc->hkv, fc->d);
    v = v_t = to_head_major(pr.v, fc->batch, fc->nk, fc->hkv, fc->dv);
    flashattn_attention_params_set_head_major_strides(p);
  }
  void* qd = as_dtype(q, pr.nq, fc->dtype);
  void* kd = as_dtype(k, pr.nk, fc->dtype);
  void* vd = as_dtype(v, pr.nv, fc->dtype);
  void* od = as_dtype(pr.o, pr.no, fc->dtype);
  p->q = qd, p->k = kd, p->v = vd, p->o = od;
  const flashattn_status status = flashattn_forward(p, fc->algorithm);
  CHECK(status == FLASHATTN_OK, "%s: %s", fc->name, flashattn_last_error());
  CHECK(strcmp(flashattn_last_error(), "") == 0, "%s: message after success: %s", fc->name, flashattn_last_error());
  float* o = malloc(pr.no * sizeof(float));
  if (fc->head_major) { /* O is (b, h, s, dv): compare it in (b, s, h, dv) */
    float* tmp = malloc(pr.no * sizeof(float));
    for (size_t n = 0; n < pr.no; ++n) tmp[n] = element(od, n, fc->dtype);
    for (int64_t b = 0; b < fc->batch; ++b)
      for (int64_t h = 0; h < fc->hq; ++h)
        for (int64_t s = 0; s < fc->nq; ++s)
          for (int64_t c = 0; c < fc->dv; ++c)
            o[((b * fc->nq + s) * fc->hq + h) * fc->dv + c] = tmp[((b * fc->hq + h) * fc->nq + s) * fc->dv + c];
    free(tmp);
  } else {
    for (size_t n = 0; n < pr.no; ++n) o[n] = element(od, n, fc->dtype);
  }
  const double o_error = max_difference(o, expected, pr.no, FLASHATTN_DTYPE_F32);
  const double lse_error = max_difference(pr.lse, expected_lse, pr.nlse, FLASHATTN_DTYPE_F32);
  CHECK(o_error <= fc->tolerance, "%s: O differs from the reference by %g", fc->name, o_error);
  CHECK(lse_error <= 1e-3, "%s: LSE differs from the reference by %g", fc->name, lse_error);

  free(o), free(qd), free(kd), free(vd), free(od), free(q_t), free(k_t), free(v_t);
  free(expected), free(expected_lse), free(keep), free(mask), free(slopes);
  free_problem(&pr);
}

static void test_forward(void) {
  const flashattn_mask_kind none = FLASHATTN_MASK_NONE;
  const flashattn_dtype f32 = FLASHATTN_DTYPE_F32;
  const flashattn_algorithm fused = FLASHATTN_ALGORITHM_FUSED;
  const forward_case cases[] = {
      {"plain", 2, 5, 7, 2, 2, 8, 8, false, -1, -1, 0, false, none, 0, f32, false, fused, 1e-5},
      {"gqa causal dv", 1, 13, 17, 4, 2, 40, 24, true, -1, -1, 0, false, none, 0, f32, false, fused, 1e-5},
      {"window softcap alibi", 2, 11, 9, 2, 1, 59, 59, false, 3, 1, 5.0f, true, none, 0, f32, false, fused, 1e-5},
      {"bool mask", 2, 6, 10, 2, 1, 16, 16, false, -1, -1, 0, false, FLASHATTN_MASK_BOOL, 0, f32, false, fused, 1e-5},
      {"additive mask", 1, 7, 8, 3, 3, 16, 16, true, -1, -1, 0, false, FLASHATTN_MASK_ADDITIVE, 0, f32, false, fused,
       1e-5},
      {"dropout", 2, 9, 12, 2, 2, 16, 16, false, -1, -1, 0, false, none, 0.3f, f32, false, fused, 1e-5},
      {"bf16 head-major", 2, 5, 9, 2, 1, 32, 32, true, -1, -1, 0, false, none, 0, FLASHATTN_DTYPE_BF16, true, fused,
       2e-2},
      {"f16", 1, 6, 6, 2, 2, 24, 24, false, -1, -1, 0, false, none, 0, FLASHATTN_DTYPE_F16, false, fused, 3e-3},
      {"standard", 1, 13, 17, 4, 2, 40, 24, true, -1, -1, 0, false, none, 0, f32, false, FLASHATTN_ALGORITHM_STANDARD,
       1e-5},
      {"flash1", 1, 13, 17, 4, 2, 40, 24, true, -1, -1, 0, false, none, 0, f32, false, FLASHATTN_ALGORITHM_FLASH1,
       1e-5},
      {"flash2", 1, 13, 17, 4, 2, 40, 24, true, -1, -1, 0, false, none, 0, f32, false, FLASHATTN_ALGORITHM_FLASH2,
       1e-5},
      {"oracle", 1, 13, 17, 4, 2, 40, 24, true, -1, -1, 0, false, none, 0, f32, false, FLASHATTN_ALGORITHM_ORACLE,
       1e-6},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) test_forward_case(&cases[c]);
}

/* The call fails with FLASHATTN_ERROR_INVALID_ARGUMENT and a message containing `argument`. */
static void check_invalid(flashattn_status status, const char* argument, const char* what) {
  CHECK(status == FLASHATTN_ERROR_INVALID_ARGUMENT, "%s: status %d (%s)", what, (int)status,
        flashattn_status_string(status));
  CHECK(strstr(flashattn_last_error(), argument) != NULL, "%s: message '%s' does not name '%s'", what,
        flashattn_last_error(), argument);
}

static void test_forward_errors(void) {
  problem pr = make_problem(1, 4, 4, 2, 1, 8, 8);
  flashattn_attention_params p = pr.params;
  p.head_dim = 0;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "head_dim", "forward head_dim 0");
  check_invalid(flashattn_validate_forward(&p), "head_dim", "validate_forward head_dim 0");
  p = pr.params;
  p.heads_kv = 3; /* heads_q = 2 is not a multiple of it */
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "heads_kv", "forward heads_kv 3");
  p = pr.params;
  p.dtype = (flashattn_dtype)7;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "dtype", "forward dtype 7");
  p = pr.params;
  p.mask.kind = (flashattn_mask_kind)9;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "mask.kind", "forward mask kind 9");
  p = pr.params;
  check_invalid(flashattn_forward(&p, (flashattn_algorithm)11), "algorithm", "forward algorithm 11");
  check_invalid(flashattn_forward(NULL, FLASHATTN_ALGORITHM_FUSED), "params", "forward NULL");
  p.dropout_p = 1.5f;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "dropout_p", "forward dropout 1.5");
  CHECK(all_equal(pr.o, pr.no, 7.0f) && all_equal(pr.lse, pr.nlse, 7.0f), "a failed forward wrote O or LSE");
  check_invalid(flashattn_materialize_dropout_mask(&pr.params, NULL), "keep", "materialize_dropout_mask NULL");

  CHECK(flashattn_validate_forward(&pr.params) == FLASHATTN_OK, "validate_forward: %s", flashattn_last_error());
  CHECK(strcmp(flashattn_last_error(), "") == 0, "message after success: %s", flashattn_last_error());
  CHECK(all_equal(pr.o, pr.no, 7.0f), "validate_forward wrote O");
  free_problem(&pr);
}

/* Selected keys: each row listing every key up to its diagonal (in reverse, with -1 holes) is the causal call;
 * a position twice is refused by name, nothing written. */
static void test_selected_keys(void) {
  enum { kNq = 5, kNk = 7, kK = 12 };
  problem dense = make_problem(1, kNq, kNk, 2, 1, 16, 16);
  dense.params.score.causal = true;
  CHECK(flashattn_forward(&dense.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "causal: %s",
        flashattn_last_error());
  int32_t lists[kNq * kK];
  for (int i = 0; i < kNq; ++i) {
    int slot = 0;
    for (int j = i + kNk - kNq; j >= 0; --j) {
      if (slot % 3 == 1) lists[i * kK + slot++] = -1;
      lists[i * kK + slot++] = j;
    }
    while (slot < kK) lists[i * kK + slot++] = -1;
  }
  problem selected = dense;
  selected.o = filled_array(dense.no, 7.0f), selected.lse = filled_array(dense.nlse, 7.0f);
  selected.params.o = selected.o, selected.params.lse = selected.lse;
  selected.params.score.causal = false;
  selected.params.key_indices.indices = lists;
  selected.params.key_indices.count = kK;
  CHECK(flashattn_forward(&selected.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "selected: %s",
        flashattn_last_error());
  CHECK(max_difference(selected.o, dense.o, dense.no, FLASHATTN_DTYPE_F32) < 1e-5, "selected keys: O differs");
  CHECK(max_difference(selected.lse, dense.lse, dense.nlse, FLASHATTN_DTYPE_F32) < 1e-5, "selected keys: LSE");
  for (size_t n = 0; n < dense.no; ++n) selected.o[n] = 7.0f;
  lists[2 * kK + 2] = lists[2 * kK]; /* row 2's first position twice */
  check_invalid(flashattn_forward(&selected.params, FLASHATTN_ALGORITHM_FUSED), "key_indices[0][2]",
                "selected keys: a duplicate");
  CHECK(all_equal(selected.o, selected.no, 7.0f), "a refused selected-key call wrote O");
  free(selected.o), free(selected.lse);
  free_problem(&dense);
}

/* ------------------------------------------------------------------------------------------------------ */
/* block masks: flashattn_create_block_mask's document mask in a forward call, against the same call with the
 * documents and the causal mask alone (which visits every tile of the band, its own tiles); rejected lists. */

enum { kBmN = 37, kBmBlock = 8, kBmBlocks = (kBmN + kBmBlock - 1) / kBmBlock };

static void test_block_mask(void) {
  problem pr = make_problem(1, kBmN, kBmN, 2, 1, 8, 8);
  int32_t documents[kBmN];
  for (int j = 0; j < kBmN; ++j) documents[j] = j < 16 ? 0 : j < 24 ? 1 : 2;
  int32_t num[kBmBlocks], indices[kBmBlocks * kBmBlocks], full_num[kBmBlocks], full_indices[kBmBlocks * kBmBlocks];
  CHECK(flashattn_create_block_mask(1, kBmN, kBmN, kBmBlock, kBmBlock, true, -1, -1, documents, 0, num, indices,
                                    full_num, full_indices) == FLASHATTN_OK,
        "create_block_mask: %s", flashattn_last_error());
  CHECK(num[0] == 1 && indices[0] == 0 && full_num[0] == 0, "query block 0 has only its diagonal block, partial");
  CHECK(num[1] == 1 && full_num[1] == 1 && full_indices[kBmBlocks] == 0, "query block 1 sees key block 0 whole");
  CHECK(num[2] == 1 && full_num[2] == 0, "query block 2 (a document of its own) sees its diagonal block only");

  flashattn_attention_params p = pr.params;
  p.score.causal = true;
  p.document_ids = documents;
  CHECK(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "forward: %s", flashattn_last_error());
  float* dense = filled_array(pr.no, 0.0f);
  memcpy(dense, pr.o, pr.no * sizeof(float));
  p.block_mask.block_size_q = p.block_mask.block_size_k = kBmBlock;
  p.block_mask.kv_num_blocks = num, p.block_mask.kv_indices = indices, p.block_mask.kv_width = kBmBlocks;
  p.block_mask.full_kv_num_blocks = full_num, p.block_mask.full_kv_indices = full_indices;
  p.block_mask.full_kv_width = kBmBlocks;
  CHECK(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "forward: %s", flashattn_last_error());
  /* The kernel's tiles follow the blocks under a block mask: the same result up to the order of the sums. */
  CHECK(max_difference(pr.o, dense, pr.no, FLASHATTN_DTYPE_F32) < 1e-6, "the block mask of the documents changes O");

  for (size_t n = 0; n < pr.no; ++n) pr.o[n] = 7.0f;
  indices[0] = kBmBlocks;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "block_mask.kv_indices", "index out of range");
  indices[0] = 0;
  p.block_mask.heads = 3;
  check_invalid(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED), "block_mask.heads", "heads 3");
  CHECK(all_equal(pr.o, pr.no, 7.0f), "a failed block-sparse forward wrote O");
  check_invalid(flashattn_create_block_mask(1, kBmN, kBmN, 0, kBmBlock, true, -1, -1, NULL, 0, num, indices,
                                            full_num, full_indices),
                "block sizes", "create_block_mask block size 0");
  free(dense);
  free_problem(&pr);
}

/* ------------------------------------------------------------------------------------------------------ */
/* forward_varlen and backward_varlen: each sequence against the batch-1 problem of its slice (the reference
 * for O and LSE, backward for the gradients), without and with dropout. Sequence b's dropout is that of its
 * batch-1 problem at dropout_offset + b. */

enum { kVarlenBatch = 3, kVarlenHq = 2, kVarlenHkv = 1, kVarlenD = 16, kVarlenTotalQ = 8, kVarlenTotalK = 12 };
static const int32_t varlen_cu_q[kVarlenBatch + 1] = {0, 3, 3, kVarlenTotalQ};
static const int32_t varlen_cu_k[kVarlenBatch + 1] = {0, 4, 6, kVarlenTotalK};

static flashattn_varlen_params varlen_params(const float* q, const float* k, const float* v, float* o, float* lse,
                                             float dropout_p) {
  flashattn_varlen_params p;
  flashattn_varlen_params_init(&p);
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
  p.batch = kVarlenBatch, p.total_q = kVarlenTotalQ, p.total_k = kVarlenTotalK;
  p.cu_seqlens_q = varlen_cu_q, p.cu_seqlens_k = varlen_cu_k, p.max_seqlen_q = 5, p.max_seqlen_k = 6;
  p.heads_q = kVarlenHq, p.heads_kv = kVarlenHkv, p.head_dim = kVarlenD, p.num_threads = 1;
  p.score.causal = true, p.score.softcap = 3.0f, p.score.has_scale = true, p.score.scale = 0.2f;
  p.dropout_p = dropout_p, p.dropout_seed = 42, p.dropout_offset = 7;
  return p;
}

/* Sequence b of `p` as a batch-1 problem: its slices of q, k, v and o (no lse), its dropout offset. */
static flashattn_attention_params varlen_sequence(const flashattn_varlen_params* p, int b) {
  flashattn_attention_params one;
  flashattn_attention_params_init(&one);
  one.seqlen_q = varlen_cu_q[b + 1] - varlen_cu_q[b], one.seqlen_k = varlen_cu_k[b + 1] - varlen_cu_k[b];
  one.heads_q = p->heads_q, one.heads_kv = p->heads_kv, one.head_dim = p->head_dim;
  one.score = p->score;
  one.dropout_p = p->dropout_p, one.dropout_seed = p->dropout_seed, one.dropout_offset = p->dropout_offset + b;
  one.num_threads = p->num_threads;
  one.q = (const float*)p->q + varlen_cu_q[b] * p->heads_q * p->head_dim;
  one.k = (const float*)p->k + varlen_cu_k[b] * p->heads_kv * p->head_dim;
  one.v = (const float*)p->v + varlen_cu_k[b] * p->heads_kv * p->head_dim;
  one.o = (float*)p->o + varlen_cu_q[b] * p->heads_q * p->head_dim;
  flashattn_attention_params_set_contiguous_strides(&one);
  return one;
}

static void test_varlen(float dropout_p) {
  const int64_t Hq = kVarlenHq, Hkv = kVarlenHkv, d = kVarlenD, total_q = kVarlenTotalQ, total_k = kVarlenTotalK;
  float* q = random_array((size_t)(total_q * Hq * d));
  float* k = random_array((size_t)(total_k * Hkv * d));
  float* v = random_array((size_t)(total_k * Hkv * d));
  float* o = filled_array((size_t)(total_q * Hq * d), 7.0f);
  float* lse = filled_array((size_t)(Hq * total_q), 7.0f);
  flashattn_varlen_params p = varlen_params(q, k, v, o, lse, dropout_p);
  CHECK(flashattn_validate_forward_varlen(&p) == FLASHATTN_OK, "%s", flashattn_last_error());
  CHECK(flashattn_forward_varlen(&p, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());

  /* The keep masks of every sequence, one after another (all ones without dropout). */
  size_t mask_size = 0;
  for (int b = 0; b < kVarlenBatch; ++b)
    mask_size += (size_t)(Hq * (varlen_cu_q[b + 1] - varlen_cu_q[b]) * (varlen_cu_k[b + 1] - varlen_cu_k[b]));
  uint8_t* keep = malloc(mask_size);
  CHECK(flashattn_materialize_dropout_mask_varlen(&p, keep) == FLASHATTN_OK, "%s", flashattn_last_error());
  size_t kept = 0;
  for (size_t n = 0; n < mask_size; ++n) kept += keep[n];
  CHECK(dropout_p > 0 ? kept > 0.5 * mask_size && kept < mask_size : kept == mask_size,
        "varlen dropout %g: %zu of %zu kept", dropout_p, kept, mask_size);

  float* expected = malloc((size_t)(5 * Hq * d) * sizeof(float));
  float* expected_lse = malloc((size_t)(Hq * 5) * sizeof(float));
  uint8_t* keep_one = malloc(mask_size);
  size_t mask_start = 0;
  for (int b = 0; b < kVarlenBatch; ++b) {
    const flashattn_attention_params one = varlen_sequence(&p, b);
    const int64_t nq = one.seqlen_q;
    const size_t one_mask_size = (size_t)(Hq * nq * one.seqlen_k);
    CHECK(flashattn_materialize_dropout_mask(&one, keep_one) == FLASHATTN_OK, "%s", flashattn_last_error());
    CHECK(memcmp(keep + mask_start, keep_one, one_mask_size) == 0,
          "varlen sequence %d: its keep mask is not that of its batch-1 problem at dropout_offset + %d", b, b);
    reference_forward(&one, one.q, one.k, one.v, expected, expected_lse, dropout_p > 0 ? keep + mask_start : NULL,
                      NULL);
    mask_start += one_mask_size;
    const double error = max_difference(one.o, expected, (size_t)(nq * Hq * d), FLASHATTN_DTYPE_F32);
    CHECK(error < 1e-5, "varlen dropout %g sequence %d: O differs by %g", dropout_p, b, error);
    for (int64_t h = 0; h < Hq; ++h) {
      const double lse_error = max_difference(lse + h * total_q + varlen_cu_q[b], expected_lse + h * nq, (size_t)nq,
                                              FLASHATTN_DTYPE_F32);
      CHECK(lse_error < 1e-4, "varlen sequence %d head %d: LSE differs by %g", b, (int)h, lse_error);
    }
  }

  /* Errors: cu_seqlens_q must end at total_q; dropout_p must be in [0, 1). Nothing is written. */
  float* o2 = filled_array((size_t)(total_q * Hq * d), 7.0f);
  flashattn_varlen_params bad = p;
  bad.o = o2, bad.lse = NULL, bad.total_q = 9;
  check_invalid(flashattn_forward_varlen(&bad, FLASHATTN_ALGORITHM_FUSED), "cu_seqlens_q", "forward_varlen total_q");
  check_invalid(flashattn_validate_forward_varlen(&bad), "cu_seqlens_q", "validate_forward_varlen total_q");
  bad = p, bad.o = o2, bad.lse = NULL;
  check_invalid(flashattn_forward_varlen(&bad, (flashattn_algorithm)-1), "algorithm", "forward_varlen algorithm");
  bad.dropout_p = 1.5f;
  check_invalid(flashattn_forward_varlen(&bad, FLASHATTN_ALGORITHM_FUSED), "dropout_p", "forward_varlen dropout 1.5");
  memset(keep_one, 2, mask_size);
  check_invalid(flashattn_materialize_dropout_mask_varlen(&bad, keep_one), "dropout_p",
                "materialize_dropout_mask_varlen dropout 1.5");
  CHECK(keep_one[0] == 2 && keep_one[mask_size - 1] == 2, "a failed materialize_dropout_mask_varlen wrote the mask");
  check_invalid(flashattn_materialize_dropout_mask_varlen(&p, NULL), "keep", "materialize_dropout_mask_varlen NULL");
  check_invalid(flashattn_forward_varlen(NULL, FLASHATTN_ALGORITHM_FUSED), "params", "forward_varlen NULL");
  CHECK(all_equal(o2, (size_t)(total_q * Hq * d), 7.0f), "a failed forward_varlen wrote O");

  /* backward_varlen: against backward on each sequence. */
  float* d_o = random_array((size_t)(total_q * Hq * d));
  float* dq = filled_array((size_t)(total_q * Hq * d), 7.0f);
  float* dk = filled_array((size_t)(total_k * Hkv * d), 7.0f);
  float* dv = filled_array((size_t)(total_k * Hkv * d), 7.0f);
  flashattn_varlen_backward_params bp;
  flashattn_varlen_backward_params_init(&bp);
  bp.forward = p, bp.d_o = d_o, bp.dq = dq, bp.dk = dk, bp.dv = dv;
  bp.forward.lse = NULL;
  check_invalid(flashattn_backward_varlen(&bp, FLASHATTN_BACKWARD_FUSED), "lse", "backward_varlen without lse");
  check_invalid(flashattn_validate_backward_varlen(&bp), "lse", "validate_backward_varlen without lse");
  check_invalid(flashattn_backward_varlen(NULL, FLASHATTN_BACKWARD_FUSED), "params", "backward_varlen NULL");
  CHECK(all_equal(dq, (size_t)(total_q * Hq * d), 7.0f) && all_equal(dk, (size_t)(total_k * Hkv * d), 7.0f),
        "a failed backward_varlen wrote dQ or dK");
  bp.forward.lse = lse;
  CHECK(flashattn_validate_backward_varlen(&bp) == FLASHATTN_OK, "%s", flashattn_last_error());
  CHECK(flashattn_backward_varlen(&bp, FLASHATTN_BACKWARD_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  for (int b = 0; b < kVarlenBatch; ++b) {
    const int64_t nq = varlen_cu_q[b + 1] - varlen_cu_q[b], nk = varlen_cu_k[b + 1] - varlen_cu_k[b];
    float* sq = filled_array((size_t)(nq * Hq * d) + 1, 0.0f);
    float* sk = filled_array((size_t)(nk * Hkv * d), 0.0f);
    float* sv = filled_array((size_t)(nk * Hkv * d), 0.0f);
    float* slse = malloc((size_t)(Hq * nq + 1) * sizeof(float));
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < nq; ++i) slse[h * nq + i] = lse[h * total_q + varlen_cu_q[b] + i];
    flashattn_backward_params one;
    flashattn_backward_params_init(&one);
    one.attention = varlen_sequence(&p, b);
    one.attention.lse = slse;
    one.d_o = d_o + varlen_cu_q[b] * Hq * d, one.dq = sq, one.dk = sk, one.dv = sv;
    flashattn_backward_params_set_contiguous_strides(&one);
    CHECK(flashattn_backward(&one, FLASHATTN_BACKWARD_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
    double error = max_difference(dq + varlen_cu_q[b] * Hq * d, sq, (size_t)(nq * Hq * d), FLASHATTN_DTYPE_F32);
    error = fmax(error, max_difference(dk + varlen_cu_k[b] * Hkv * d, sk, (size_t)(nk * Hkv * d), FLASHATTN_DTYPE_F32));
    error = fmax(error, max_difference(dv + varlen_cu_k[b] * Hkv * d, sv, (size_t)(nk * Hkv * d), FLASHATTN_DTYPE_F32));
    CHECK(error < 1e-5, "backward_varlen dropout %g sequence %d differs from backward by %g", dropout_p, b, error);
    free(sq), free(sk), free(sv), free(slse);
  }
  free(q), free(k), free(v), free(o), free(o2), free(lse), free(expected), free(expected_lse);
  free(keep), free(keep_one), free(d_o), free(dq), free(dk), free(dv);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Quantized caches: flashattn_quantize_kv fills an int8 cache (per token, groups of 8) and FP8 E4M3 and E5M2
 * ones (per K/V head); decode over each agrees with the reference over the dequantized values, int8 also with
 * integer scores (within the queries' rounding); bad arguments are refused naming the field. */

enum { kQuantBatch = 2, kQuantMax = 40, kQuantHq = 4, kQuantHkv = 2, kQuantD = 40, kQuantGroup = 8 };

static float e4m3_value(uint8_t bits) {
  const int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  const float magnitude =
      exponent ? ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7) : ldexpf((float)mantissa, -9);
  return bits & 0x80 ? -magnitude : magnitude;
}

static float e5m2_value(uint8_t bits) { /* finite codes only */
  const int exponent = (bits >> 2) & 31, mantissa = bits & 3;
  const float magnitude =
      exponent ? ldexpf(1.0f + (float)mantissa / 4.0f, exponent - 15) : ldexpf((float)mantissa, -16);
  return bits & 0x80 ? -magnitude : magnitude;
}

static void test_quantized_decode(void) {
  const size_t cache_size = (size_t)kQuantBatch * kQuantMax * kQuantHkv * kQuantD;
  const size_t q_size = (size_t)kQuantBatch * kQuantHq * kQuantD;
  const int32_t seqlens[kQuantBatch] = {kQuantMax, 23};
  float* q = random_array(q_size);
  const flashattn_cache_element elements[] = {FLASHATTN_CACHE_INT8, FLASHATTN_CACHE_FP8_E4M3, FLASHATTN_CACHE_FP8_E5M2};
  for (int format = 0; format < 3; ++format) {
    const int fp8 = elements[format] != FLASHATTN_CACHE_INT8;
    float* x[2] = {random_array(cache_size), random_array(cache_size)};
    uint8_t* values[2] = {malloc(cache_size), malloc(cache_size)};
    float* scales[2] = {malloc(cache_size * sizeof(float)), malloc(cache_size * sizeof(float))};
    float* dequantized[2] = {malloc(cache_size * sizeof(float)), malloc(cache_size * sizeof(float))};
    flashattn_quantize_params qp;
    flashattn_quantize_params_init(&qp);
    qp.outer = kQuantBatch, qp.seqlen = kQuantMax, qp.heads = kQuantHkv, qp.head_dim = kQuantD;
    qp.element = elements[format];
    qp.granularity = fp8 ? FLASHATTN_SCALE_PER_HEAD : FLASHATTN_SCALE_PER_TOKEN;
    qp.group_size = fp8 ? 0 : kQuantGroup;
    flashattn_quantize_params_set_contiguous_strides(&qp);
    for (int t = 0; t < 2; ++t) {
      qp.x = x[t], qp.values = values[t], qp.scales = scales[t];
      CHECK(flashattn_quantize_kv(&qp) == FLASHATTN_OK, "quantize_kv format %d: %s", format, flashattn_last_error());
      for (size_t n = 0; n < cache_size; ++n) {
        const size_t row = n / kQuantD, head = row % kQuantHkv;
        const float scale = fp8 ? scales[t][head] : scales[t][row * (kQuantD / kQuantGroup) + n % kQuantD / kQuantGroup];
        const float value = !fp8 ? (float)(int8_t)values[t][n]
                            : qp.element == FLASHATTN_CACHE_FP8_E4M3 ? e4m3_value(values[t][n])
                                                                     : e5m2_value(values[t][n]);
        dequantized[t][n] = scale * value;
      }
    }
    flashattn_quantize_params bad_quantize = qp;
    bad_quantize.group_size = 7;
    check_invalid(flashattn_quantize_kv(&bad_quantize), "group_size", "quantize_kv group_size 7");

    float* expected_o = malloc(q_size * sizeof(float));
    for (int b = 0; b < kQuantBatch; ++b) {
      flashattn_attention_params one;
      flashattn_attention_params_init(&one);
      one.seqlen_q = 1, one.seqlen_k = seqlens[b], one.heads_q = kQuantHq, one.heads_kv = kQuantHkv;
      one.head_dim = kQuantD;
      const size_t sequence = (size_t)b * kQuantMax * kQuantHkv * kQuantD;
      reference_forward(&one, q + b * kQuantHq * kQuantD, dequantized[0] + sequence, dequantized[1] + sequence,
                        expected_o + b * kQuantHq * kQuantD, NULL, NULL, NULL);
    }
    float* o = filled_array(q_size, 7.0f);
    flashattn_decode_params p;
    flashattn_decode_params_init(&p);
    p.q = q, p.k_cache = values[0], p.v_cache = values[1], p.o = o, p.cache_seqlens = seqlens;
    p.batch = kQuantBatch, p.seqlen_q = 1, p.heads_q = kQuantHq, p.heads_kv = kQuantHkv, p.head_dim = kQuantD;
    p.cache_seqlen_max = kQuantMax, p.num_splits = 2, p.num_threads = 2;
    p.cache_element = qp.element, p.scale_granularity = qp.granularity, p.scale_group_size = qp.group_size;
    p.k_scale = scales[0], p.v_scale = scales[1];
    flashattn_decode_params_set_contiguous_strides(&p);

    flashattn_decode_params bad = p;
    bad.cache_element = (flashattn_cache_element)7;
    check_invalid(flashattn_decode(&bad), "cache_element", "decode cache_element 7");
    bad = p, bad.quantize_query_int8 = true, bad.cache_element = FLASHATTN_CACHE_FP8_E4M3;
    check_invalid(flashattn_decode(&bad), "quantize_query_int8", "decode quantize_query_int8 over an fp8 cache");
    bad = p, bad.quantize_probs_u8 = true, bad.cache_element = FLASHATTN_CACHE_FP8_E4M3;
    check_invalid(flashattn_decode(&bad), "quantize_probs_u8", "decode quantize_probs_u8 over an fp8 cache");
    if (!fp8) { /* int8 scales in groups of kQuantGroup */
      bad = p, bad.quantize_probs_u8 = true;
      check_invalid(flashattn_validate_decode(&bad), "quantize_probs_u8 needs one V scale per row",
                    "validate_decode quantize_probs_u8 over scale groups");
    }
    bad = p, bad.k_scale = NULL;
    check_invalid(flashattn_decode(&bad), "k_scale", "decode without k_scale");
    CHECK(all_equal(o, q_size, 7.0f), "a failed quantized decode wrote O");

    CHECK(flashattn_decode(&p) == FLASHATTN_OK, "decode format %d: %s", format, flashattn_last_error());
    double error = max_difference(o, expected_o, q_size, FLASHATTN_DTYPE_F32);
    CHECK(error < 1e-5, "quantized decode format %d: O differs from the dequantized reference by %g", format, error);
    if (!fp8) {
      p.quantize_query_int8 = true;
      CHECK(flashattn_decode(&p) == FLASHATTN_OK, "decode with integer scores: %s", flashattn_last_error());
      error = max_difference(o, expected_o, q_size, FLASHATTN_DTYPE_F32);
      CHECK(error > 0 && error < 2e-2, "decode with integer scores: O differs from the reference by %g", error);
    }
    free(o), free(expected_o);
    for (int t = 0; t < 2; ++t) free(x[t]), free(values[t]), free(scales[t]), free(dequantized[t]);
  }
  free(q);
}

/* ------------------------------------------------------------------------------------------------------ */
/* decode: append, rotary (GPT-NeoX halves) and splits over a contiguous cache, against the reference on the
 * cache's contents; the same over a paged cache whose pages are in reverse order. */

enum { kDecBatch = 2, kDecMax = 16, kDecNew = 2, kDecHq = 2, kDecHkv = 1, kDecD = 16, kDecRot = 8, kDecPage = 4 };
static const int32_t decode_seqlens[kDecBatch] = {5, 9};

/* x[c] and x[c + rot/2] rotated by the angle of (pos, c). */
static void rotate(float* x, const float* cos_table, const float* sin_table, int64_t pos) {
  for (int c = 0; c < kDecRot / 2; ++c) {
    const float x0 = x[c], x1 = x[c + kDecRot / 2];
    const float cs = cos_table[pos * (kDecRot / 2) + c], sn = sin_table[pos * (kDecRot / 2) + c];
    x[c] = x0 * cs - x1 * sn, x[c + kDecRot / 2] = x0 * sn + x1 * cs;
  }
}

static void test_decode(void) {
  const size_t cache_size = (size_t)kDecBatch * kDecMax * kDecHkv * kDecD;
  const size_t q_size = (size_t)kDecBatch * kDecNew * kDecHq * kDecD;
  const size_t new_size = (size_t)kDecBatch * kDecNew * kDecHkv * kDecD;
  float* k_cache = random_array(cache_size);
  float* v_cache = random_array(cache_size);
  float* q = random_array(q_size);
  float* k_new = random_array(new_size);
  float* v_new = random_array(new_size);
  float* cos_table = malloc(kDecMax * kDecRot / 2 * sizeof(float));
  float* sin_table = malloc(kDecMax * kDecRot / 2 * sizeof(float));
  for (int n = 0; n < kDecMax * kDecRot / 2; ++n) cos_table[n] = cosf(0.3f * (float)n), sin_table[n] = sinf(0.3f * (float)n);

  /* Expected: the rotated rows appended to a copy of the cache, then attention over each sequence. */
  float* expected_k = malloc(cache_size * sizeof(float));
  float* expected_v = malloc(cache_size * sizeof(float));
  memcpy(expected_k, k_cache, cache_size * sizeof(float));
  memcpy(expected_v, v_cache, cache_size * sizeof(float));
  float* rotated_q = malloc(q_size * sizeof(float));
  memcpy(rotated_q, q, q_size * sizeof(float));
  float* expected_o = malloc(q_size * sizeof(float));
  for (int b = 0; b < kDecBatch; ++b) {
    for (int i = 0; i < kDecNew; ++i) {
      const int64_t pos = decode_seqlens[b] + i;
      for (int h = 0; h < kDecHkv; ++h) {
        float* kr = expected_k + ((b * kDecMax + pos) * kDecHkv + h) * kDecD;
        memcpy(kr, k_new + ((b * kDecNew + i) * kDecHkv + h) * kDecD, kDecD * sizeof(float));
        rotate(kr, cos_table, sin_table, pos);
        memcpy(expected_v + ((b * kDecMax + pos) * kDecHkv + h) * kDecD, v_new + ((b * kDecNew + i) * kDecHkv + h) * kDecD,
               kDecD * sizeof(float));
      }
      for (int h = 0; h < kDecHq; ++h) rotate(rotated_q + ((b * kDecNew + i) * kDecHq + h) * kDecD, cos_table, sin_table, pos);
    }
    flashattn_attention_params one;
    flashattn_attention_params_init(&one);
    one.seqlen_q = kDecNew, one.seqlen_k = decode_seqlens[b] + kDecNew, one.heads_q = kDecHq, one.heads_kv = kDecHkv;
    one.head_dim = kDecD, one.score.causal = true;
    reference_forward(&one, rotated_q + b * kDecNew * kDecHq * kDecD, expected_k + b * kDecMax * kDecHkv * kDecD,
                      expected_v + b * kDecMax * kDecHkv * kDecD, expected_o + b * kDecNew * kDecHq * kDecD, NULL, NULL, NULL);
  }

  for (int paged = 0; paged <= 1; ++paged)
    for (int64_t splits = 1; splits <= 3; splits += 2) {
      float* kc = malloc(cache_size * sizeof(float));
      float* vc = malloc(cache_size * sizeof(float));
      float* o = filled_array(q_size, 7.0f);
      const int pages_per_seq = kDecMax / kDecPage, num_pages = kDecBatch * pages_per_seq;
      int32_t block_table[kDecBatch * (kDecMax / kDecPage)];
      /* Page n of sequence b is physical page num_pages − 1 − (b·pages_per_seq + n). */
      for (int n = 0; n < num_pages; ++n) block_table[n] = paged ? num_pages - 1 - n : n;
      for (int n = 0; n < num_pages; ++n) {
        const size_t page = (size_t)kDecPage * kDecHkv * kDecD;
        memcpy(kc + block_table[n] * page, k_cache + n * page, page * sizeof(float));
        memcpy(vc + block_table[n] * page, v_cache + n * page, page * sizeof(float));
      }
      flashattn_decode_params p;
      flashattn_decode_params_init(&p);
      p.q = q, p.k_cache = kc, p.v_cache = vc, p.k_new = k_new, p.v_new = v_new, p.o = o, p.cache_seqlens = decode_seqlens;
      p.batch = kDecBatch, p.seqlen_q = kDecNew, p.seqlen_new = kDecNew, p.heads_q = kDecHq, p.heads_kv = kDecHkv;
      p.head_dim = kDecD;
      if (paged) {
        p.block_table = block_table, p.block_table_stride = pages_per_seq, p.max_pages = pages_per_seq;
        p.num_pages = num_pages, p.page_size = kDecPage;
      } else {
        p.cache_seqlen_max = kDecMax;
      }
      p.rotary_cos = cos_table, p.rotary_sin = sin_table, p.rotary_dim = kDecRot, p.rotary_max_pos = kDecMax;
      p.score.causal = true, p.num_splits = splits, p.num_threads = 2;
      flashattn_decode_params_set_contiguous_strides(&p);

      /* A failing call first: a sequence that would outgrow the cache. Nothing may change. */
      const int32_t too_long[kDecBatch] = {5, kDecMax - 1};
      flashattn_decode_params bad = p;
      bad.cache_seqlens = too_long;
      check_invalid(flashattn_decode(&bad), "cache_seqlens[1]", "decode beyond the cache");
      check_invalid(flashattn_validate_decode(&bad), "cache_seqlens[1]", "validate_decode beyond the cache");
      bad = p, bad.cache_dtype = (flashattn_dtype)3;
      check_invalid(flashattn_decode(&bad), "cache_dtype", "decode cache_dtype 3");
      check_invalid(flashattn_decode(NULL), "params", "decode NULL");
      const int32_t negative_keys_after[kDecBatch] = {0, -1};
      bad = p;
      bad.keys_after = negative_keys_after;
      check_invalid(flashattn_decode(&bad), "keys_after", "decode with a negative keys_after");
      bad = p;
      bad.v_cache = bad.k_cache, bad.v_new = NULL, bad.head_dim_v = kDecD + 1;
      check_invalid(flashattn_decode(&bad), "head_dim_v", "decode reading V inside K with dv > d");
      CHECK(all_equal(o, q_size, 7.0f), "a failed decode wrote O");
      int unchanged = 1;
      for (int n = 0; n < num_pages; ++n) {
        const size_t page = (size_t)kDecPage * kDecHkv * kDecD;
        unchanged &= memcmp(kc + block_table[n] * page, k_cache + n * page, page * sizeof(float)) == 0;
      }
      CHECK(unchanged, "a failed decode changed the cache");

      CHECK(flashattn_validate_decode(&p) == FLASHATTN_OK, "%s", flashattn_last_error());
      CHECK(flashattn_decode(&p) == FLASHATTN_OK, "paged=%d splits=%d: %s", paged, (int)splits, flashattn_last_error());
      const double error = max_difference(o, expected_o, q_size, FLASHATTN_DTYPE_F32);
      CHECK(error < 1e-5, "decode paged=%d splits=%d: O differs by %g", paged, (int)splits, error);
      double cache_error = 0.0;
      for (int n = 0; n < num_pages; ++n) {
        const size_t page = (size_t)kDecPage * kDecHkv * kDecD;
        cache_error = fmax(cache_error, max_difference(kc + block_table[n] * page, expected_k + n * page, page,
                                                       FLASHATTN_DTYPE_F32));
        cache_error = fmax(cache_error, max_difference(vc + block_table[n] * page, expected_v + n * page, page,
                                                       FLASHATTN_DTYPE_F32));
      }
      CHECK(cache_error < 1e-6, "decode paged=%d: the appended cache differs by %g", paged, cache_error);
      free(kc), free(vc), free(o);
    }

  /* rotary_queries_at_cache_end: every query row rotated at cache_seqlens[b], so without causal or window
   * query row i of a two-row call gives what a one-row call of row i alone gives (rotated there too). */
  {
    float* both = filled_array(q_size, 7.0f);
    float* alone = filled_array(q_size, 7.0f);
    flashattn_decode_params p;
    flashattn_decode_params_init(&p);
    p.q = q, p.k_cache = k_cache, p.v_cache = v_cache, p.o = both, p.cache_seqlens = decode_seqlens;
    p.batch = kDecBatch, p.seqlen_q = kDecNew, p.heads_q = kDecHq, p.heads_kv = kDecHkv, p.head_dim = kDecD;
    p.cache_seqlen_max = kDecMax;
    p.rotary_cos = cos_table, p.rotary_sin = sin_table, p.rotary_dim = kDecRot, p.rotary_max_pos = kDecMax;
    p.rotary_queries_at_cache_end = true;
    flashattn_decode_params_set_contiguous_strides(&p);
    CHECK(flashattn_decode(&p) == FLASHATTN_OK, "%s", flashattn_last_error());
    for (int i = 0; i < kDecNew; ++i) {
      flashattn_decode_params row = p;
      row.seqlen_q = 1;
      row.q = q + i * kDecHq * kDecD, row.o = alone + i * kDecHq * kDecD;  /* strides stay those of q and o */
      CHECK(flashattn_decode(&row) == FLASHATTN_OK, "%s", flashattn_last_error());
    }
    const double error = max_difference(both, alone, q_size, FLASHATTN_DTYPE_F32);
    CHECK(error < 1e-6, "rotary_queries_at_cache_end: two rows differ from one row at a time by %g", error);
    free(both), free(alone);
  }

  int64_t splits = 0;
  CHECK(flashattn_choose_num_splits(1, 100000, 8, &splits) == FLASHATTN_OK && splits > 1,
        "choose_num_splits(1, 100000, 8) = %d: %s", (int)splits, flashattn_last_error());
  CHECK(flashattn_choose_num_splits(64, 100, 2, &splits) == FLASHATTN_OK && splits == 1,
        "choose_num_splits(64, 100, 2) = %d", (int)splits);
  check_invalid(flashattn_choose_num_splits(1, 100, 1, NULL), "num_splits", "choose_num_splits NULL");

  free(k_cache), free(v_cache), free(q), free(k_new), free(v_new), free(cos_table), free(sin_table);
  free(expected_k), free(expected_v), free(rotated_q), free(expected_o);
}

/* ------------------------------------------------------------------------------------------------------ */
/* decode with V inside the keys (multi-head latent attention: v_cache == k_cache, dv < d) and strides from
 * the helper: o holds exactly (batch, Nq, Hq, dv) floats, so strides computed from d would write past it. */

enum { kMlaBatch = 2, kMlaMax = 8, kMlaQ = 2, kMlaHq = 4, kMlaD = 24, kMlaDv = 16 };

static void test_decode_values_in_keys(void) {
  const int32_t seqlens[kMlaBatch] = {3, 5};
  const size_t cache_size = (size_t)kMlaBatch * kMlaMax * kMlaD, q_size = (size_t)kMlaBatch * kMlaQ * kMlaHq * kMlaD;
  const size_t o_size = (size_t)kMlaBatch * kMlaQ * kMlaHq * kMlaDv;
  float* cache = random_array(cache_size);
  float* k_new = random_array((size_t)kMlaBatch * kMlaD);
  float* q = random_array(q_size);
  float* o = filled_array(o_size, 7.0f);
  flashattn_decode_params p;
  flashattn_decode_params_init(&p);
  p.q = q, p.k_cache = cache, p.v_cache = cache, p.k_new = k_new, p.o = o, p.cache_seqlens = seqlens;
  p.batch = kMlaBatch, p.seqlen_q = kMlaQ, p.seqlen_new = 1, p.heads_q = kMlaHq, p.heads_kv = 1;
  p.head_dim = kMlaD, p.head_dim_v = kMlaDv, p.cache_seqlen_max = kMlaMax, p.score.causal = true;
  flashattn_decode_params_set_contiguous_strides(&p);
  CHECK(p.o_strides.batch == kMlaQ * kMlaHq * kMlaDv && p.o_strides.seq == kMlaHq * kMlaDv &&
            p.o_strides.head == kMlaDv,
        "o_strides (%d, %d, %d) are not those of (batch, Nq, Hq, dv)", (int)p.o_strides.batch,
        (int)p.o_strides.seq, (int)p.o_strides.head);
  CHECK(p.cache_strides.seq == kMlaD && p.q_strides.head == kMlaD && p.new_strides.batch == kMlaD, "strides of d");
  float* expected_k = malloc(cache_size * sizeof(float));
  memcpy(expected_k, cache, cache_size * sizeof(float));
  CHECK(flashattn_decode(&p) == FLASHATTN_OK, "%s", flashattn_last_error());

  /* Expected: each sequence with k_new appended, V the first dv features of each K row. */
  float* expected_o = malloc(o_size * sizeof(float));
  float* v = malloc((size_t)kMlaMax * kMlaDv * sizeof(float));
  for (int b = 0; b < kMlaBatch; ++b) {
    float* k = expected_k + (size_t)b * kMlaMax * kMlaD;
    memcpy(k + seqlens[b] * kMlaD, k_new + b * kMlaD, kMlaD * sizeof(float));
    for (int j = 0; j <= seqlens[b]; ++j) memcpy(v + j * kMlaDv, k + j * kMlaD, kMlaDv * sizeof(float));
    flashattn_attention_params one;
    flashattn_attention_params_init(&one);
    one.seqlen_q = kMlaQ, one.seqlen_k = seqlens[b] + 1, one.heads_q = kMlaHq, one.head_dim = kMlaD;
    one.head_dim_v = kMlaDv, one.score.causal = true;
    const size_t rows = (size_t)b * kMlaQ * kMlaHq;
    reference_forward(&one, q + rows * kMlaD, k, v, expected_o + rows * kMlaDv, NULL, NULL, NULL);
  }
  const double error = max_difference(o, expected_o, o_size, FLASHATTN_DTYPE_F32);
  CHECK(error < 1e-5, "decode with V inside K: O differs by %g", error);
  free(cache), free(k_new), free(q), free(o), free(expected_k), free(expected_o), free(v);
}

/* ------------------------------------------------------------------------------------------------------ */
/* The working memory calling threads keep: the default limit, a limit of 0, and the release. */

static void test_working_memory(void) {
  const size_t limit = flashattn_working_memory_limit();
  CHECK(limit == (size_t)64 << 20, "the default limit is %zu bytes", limit);
  problem pr = make_problem(1, 32, 48, 2, 1, 16, 16);
  flashattn_set_working_memory_limit(0);
  CHECK(flashattn_working_memory_limit() == 0 && flashattn_retained_working_memory() == 0, "limit 0");
  CHECK(flashattn_forward(&pr.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  CHECK(flashattn_retained_working_memory() == 0, "%zu bytes kept with a limit of 0",
        flashattn_retained_working_memory());
  flashattn_set_working_memory_limit(limit);
  CHECK(flashattn_forward(&pr.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  const size_t kept = flashattn_retained_working_memory();
  CHECK(kept > 0 && kept <= limit, "%zu bytes kept", kept);
  flashattn_release_working_memory();
  CHECK(flashattn_retained_working_memory() == 0, "%zu bytes kept after the release",
        flashattn_retained_working_memory());
  free_problem(&pr);
}

/* ------------------------------------------------------------------------------------------------------ */
/* merge_attention_states: attention over the first and the last keys, merged, equals attention over all. */

static void test_merge(void) {
  const int64_t B = 2, N = 5, Nk = 11, split = 4, H = 2, d = 8;
  problem full = make_problem(B, N, Nk, H, H, d, d);
  CHECK(flashattn_forward(&full.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  float* o_partials = malloc(2 * full.no * sizeof(float));
  float* lse_partials = malloc(2 * full.nlse * sizeof(float));
  /* Partial 0 sees keys [0, split), partial 1 keys [split, Nk): the same K, V through offset pointers. */
  for (int part = 0; part < 2; ++part) {
    flashattn_attention_params p = full.params;
    p.seqlen_k = part == 0 ? split : Nk - split;
    p.k = full.k + (part == 0 ? 0 : split * H * d), p.v = full.v + (part == 0 ? 0 : split * H * d);
    p.o = o_partials + part * full.no, p.lse = lse_partials + part * full.nlse;
    CHECK(flashattn_forward(&p, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  }
  float* o = filled_array(full.no, 7.0f);
  float* lse = filled_array(full.nlse, 7.0f);
  flashattn_merge_params m;
  flashattn_merge_params_init(&m);
  m.o_partials = o_partials, m.lse_partials = lse_partials, m.o = o, m.lse = lse;
  m.num_partials = 2, m.batch = B, m.seqlen = N, m.heads = H, m.head_dim_v = d;
  flashattn_merge_params_set_contiguous_strides(&m);

  flashattn_merge_params bad = m;
  bad.num_partials = -1;
  check_invalid(flashattn_merge_attention_states(&bad), "num_partials", "merge num_partials -1");
  check_invalid(flashattn_validate_merge(&bad), "num_partials", "validate_merge num_partials -1");
  bad = m, bad.dtype = (flashattn_dtype)5;
  check_invalid(flashattn_merge_attention_states(&bad), "dtype", "merge dtype 5");
  check_invalid(flashattn_merge_attention_states(NULL), "params", "merge NULL");
  CHECK(all_equal(o, full.no, 7.0f) && all_equal(lse, full.nlse, 7.0f), "a failed merge wrote O or LSE");

  CHECK(flashattn_validate_merge(&m) == FLASHATTN_OK, "%s", flashattn_last_error());
  CHECK(flashattn_merge_attention_states(&m) == FLASHATTN_OK, "%s", flashattn_last_error());
  const double error = max_difference(o, full.o, full.no, FLASHATTN_DTYPE_F32);
  const double lse_error = max_difference(lse, full.lse, full.nlse, FLASHATTN_DTYPE_F32);
  CHECK(error < 1e-5 && lse_error < 1e-5, "merged partials differ from the full call by %g (LSE %g)", error, lse_error);
  free(o_partials), free(lse_partials), free(o), free(lse);
  free_problem(&full);
}

/* ------------------------------------------------------------------------------------------------------ */
/* backward: dV = Pᵀ dO summed over the query heads of each K/V head, against the reference's P; dQ and dK
 * of the fused kernel against the oracle. */

static void test_backward(void) {
  const int64_t Nq = 6, Nk = 7, Hq = 2, Hkv = 1, d = 40;
  problem pr = make_problem(1, Nq, Nk, Hq, Hkv, d, d);
  flashattn_attention_params* a = &pr.params;
  a->score.causal = true, a->score.softcap = 4.0f;
  CHECK(flashattn_forward(a, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  float* d_o = random_array(pr.no);
  double* probs = malloc((size_t)(Hq * Nq * Nk) * sizeof(double));
  float* scratch = malloc(pr.no * sizeof(float));
  reference_forward(a, pr.q, pr.k, pr.v, scratch, NULL, NULL, probs);
  float* expected_dv = filled_array(pr.nv, 0.0f);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < Nq; ++i)
      for (int64_t j = 0; j < Nk; ++j)
        for (int64_t c = 0; c < d; ++c)
          expected_dv[(j * Hkv + h / (Hq / Hkv)) * d + c] += (float)(probs[(h * Nq + i) * Nk + j] * d_o[(i * Hq + h) * d + c]);

  float* grads[2][3];
  for (int algorithm = 0; algorithm < 2; ++algorithm) {
    flashattn_backward_params bp;
    flashattn_backward_params_init(&bp);
    bp.attention = *a;
    grads[algorithm][0] = filled_array(pr.nq, 7.0f);
    grads[algorithm][1] = filled_array(pr.nk, 7.0f);
    grads[algorithm][2] = filled_array(pr.nv, 7.0f);
    bp.d_o = d_o, bp.dq = grads[algorithm][0], bp.dk = grads[algorithm][1], bp.dv = grads[algorithm][2];
    flashattn_backward_params_set_contiguous_strides(&bp);
    if (algorithm == 0) {
      flashattn_backward_params bad = bp;
      bad.attention.lse = NULL;
      check_invalid(flashattn_backward(&bad, FLASHATTN_BACKWARD_FUSED), "lse", "backward without lse");
      check_invalid(flashattn_validate_backward(&bad), "lse", "validate_backward without lse");
      check_invalid(flashattn_backward(&bp, (flashattn_backward_algorithm)3), "algorithm", "backward algorithm 3");
      check_invalid(flashattn_backward(NULL, FLASHATTN_BACKWARD_FUSED), "params", "backward NULL");
      CHECK(all_equal(grads[0][0], pr.nq, 7.0f) && all_equal(grads[0][1], pr.nk, 7.0f) &&
                all_equal(grads[0][2], pr.nv, 7.0f),
            "a failed backward wrote a gradient");
      CHECK(flashattn_validate_backward(&bp) == FLASHATTN_OK, "%s", flashattn_last_error());
    }
    const flashattn_backward_algorithm which = algorithm == 0 ? FLASHATTN_BACKWARD_FUSED : FLASHATTN_BACKWARD_ORACLE;
    CHECK(flashattn_backward(&bp, which) == FLASHATTN_OK, "%s", flashattn_last_error());
  }
  const double dv_error = max_difference(grads[0][2], expected_dv, pr.nv, FLASHATTN_DTYPE_F32);
  const double dq_error = max_difference(grads[0][0], grads[1][0], pr.nq, FLASHATTN_DTYPE_F32);
  const double dk_error = max_difference(grads[0][1], grads[1][1], pr.nk, FLASHATTN_DTYPE_F32);
  CHECK(dv_error < 1e-5, "backward dV differs from Pᵀ dO by %g", dv_error);
  CHECK(dq_error < 1e-5 && dk_error < 1e-5, "fused dQ, dK differ from the oracle's by %g, %g", dq_error, dk_error);
  CHECK(!all_equal(grads[0][0], pr.nq, 0.0f), "dQ is all zero");

  for (int algorithm = 0; algorithm < 2; ++algorithm)
    for (int n = 0; n < 3; ++n) free(grads[algorithm][n]);
  free(d_o), free(probs), free(scratch), free(expected_dv);
  free_problem(&pr);
}

/* ------------------------------------------------------------------------------------------------------ */
/* Attention sinks, their gradient, a block of a larger problem, and the decode fields that go with them. */

/* With a sink s_h, LSE' = log(e^LSE + e^s_h) and O' = O·e^(LSE − LSE') (the sink carries no value); a sink
 * of −∞ changes nothing. dsinks_h = −Σ_i e^(s_h − LSE'_i)·D_i with D_i = rowsum(dO_i ∘ O'_i). */
static void test_sinks(void) {
  const int64_t Nq = 9, Nk = 11, Hq = 3, Hkv = 1, d = 40;
  problem plain = make_problem(1, Nq, Nk, Hq, Hkv, d, d);
  plain.params.score.causal = true;
  CHECK(flashattn_forward(&plain.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());

  const float sinks[3] = {0.5f, -INFINITY, 2.0f};
  flashattn_attention_params a = plain.params;
  float* o = filled_array(plain.no, 7.0f);
  float* lse = filled_array(plain.nlse, 7.0f);
  a.o = o, a.lse = lse, a.score.sinks = sinks;
  CHECK(flashattn_forward(&a, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  double o_error = 0.0, lse_error = 0.0;
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < Nq; ++i) {
      const double l = plain.lse[h * Nq + i];
      const double expected = isinf(sinks[h]) ? l : log(exp(l) + exp((double)sinks[h]));
      lse_error = fmax(lse_error, fabs(lse[h * Nq + i] - expected));
      for (int64_t c = 0; c < d; ++c) {
        const size_t at = (size_t)((i * Hq + h) * d + c);
        o_error = fmax(o_error, fabs(o[at] - plain.o[at] * exp(l - expected)));
      }
    }
  CHECK(lse_error < 1e-5 && o_error < 1e-5, "forward with sinks: LSE off by %g, O off by %g", lse_error, o_error);
  CHECK(memcmp(o + d, plain.o + d, (size_t)d * sizeof(float)) == 0, "a sink of -inf changed O");

  float* d_o = random_array(plain.no);
  float* grads[3] = {filled_array(plain.nq, 0.0f), filled_array(plain.nk, 0.0f), filled_array(plain.nk, 0.0f)};
  float dsinks[3] = {7.0f, 7.0f, 7.0f};
  flashattn_backward_params bp;
  flashattn_backward_params_init(&bp);
  bp.attention = a;
  bp.d_o = d_o, bp.dq = grads[0], bp.dk = grads[1], bp.dv = grads[2], bp.dsinks = dsinks;
  flashattn_backward_params_set_contiguous_strides(&bp);
  CHECK(flashattn_backward(&bp, FLASHATTN_BACKWARD_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  for (int64_t h = 0; h < Hq; ++h) {
    double expected = 0.0;
    for (int64_t i = 0; i < Nq; ++i) {
      double D = 0.0;
      for (int64_t c = 0; c < d; ++c) D += (double)d_o[(i * Hq + h) * d + c] * o[(i * Hq + h) * d + c];
      if (!isinf(sinks[h])) expected -= exp(sinks[h] - (double)lse[h * Nq + i]) * D;
    }
    CHECK(fabs(dsinks[h] - expected) < 1e-5, "dsinks[%d] = %g, expected %g", (int)h, dsinks[h], expected);
  }
  flashattn_backward_params no_sinks = bp;
  no_sinks.attention.score.sinks = NULL;
  check_invalid(flashattn_backward(&no_sinks, FLASHATTN_BACKWARD_FUSED), "dsinks", "dsinks without sinks");

  for (int n = 0; n < 3; ++n) free(grads[n]);
  free(d_o), free(o), free(lse);
  free_problem(&plain);
}

/* The last rows of a causal problem computed on their own, placed by block_position, equal those rows of the
 * whole call; without the position the band would be aligned to the block's own bottom-right corner. */
static void test_block_position(void) {
  const int64_t N = 13, first = 8, Hq = 2, d = 16;
  problem whole = make_problem(1, N, N, Hq, Hq, d, d);
  whole.params.score.causal = true;
  CHECK(flashattn_forward(&whole.params, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());

  flashattn_attention_params rows = whole.params;
  float* o = filled_array((size_t)((N - first) * Hq * d), 7.0f);
  rows.q = whole.q + first * Hq * d, rows.o = o, rows.lse = NULL, rows.seqlen_q = N - first;
  flashattn_attention_params_set_contiguous_strides(&rows);
  rows.block_position.query_start = first, rows.block_position.total_seqlen_q = N;
  CHECK(flashattn_forward(&rows, FLASHATTN_ALGORITHM_FUSED) == FLASHATTN_OK, "%s", flashattn_last_error());
  const double error = max_difference(o, whole.o + first * Hq * d, (size_t)((N - first) * Hq * d), FLASHATTN_DTYPE_F32);
  CHECK(error < 1e-6, "rows placed by block_position differ from the whole call's by %g", error);

  rows.block_position.query_start = first + 1; /* its N − first rows would end at N + 1 */
  check_invalid(flashattn_forward(&rows, FLASHATTN_ALGORITHM_FUSED), "block_position.query_start", "block past the end");
  free(o);
  free_problem(&whole);
}

/* ------------------------------------------------------------------------------------------------------ */
/* The small functions, and the last error's being per thread. */

static int fail_in_thread(void* message) {
  check_invalid(flashattn_forward(NULL, FLASHATTN_ALGORITHM_FUSED), "params", "forward NULL in a thread");
  strncpy(message, flashattn_last_error(), 255);
  return 0;
}

static void test_misc(const char* expected_version) {
  CHECK(strcmp(flashattn_version(), expected_version) == 0, "version %s, expected %s", flashattn_version(),
        expected_version);
  CHECK(strcmp(flashattn_status_string(FLASHATTN_OK), "ok") == 0, "%s", flashattn_status_string(FLASHATTN_OK));
  CHECK(strcmp(flashattn_status_string(FLASHATTN_ERROR_INVALID_ARGUMENT), "invalid argument") == 0, "status string");
  CHECK(strcmp(flashattn_status_string(FLASHATTN_ERROR_OUT_OF_MEMORY), "out of memory") == 0, "status string");
  CHECK(strcmp(flashattn_status_string(FLASHATTN_ERROR_INTERNAL), "internal error") == 0, "status string");
  CHECK(strcmp(flashattn_status_string((flashattn_status)42), "unknown status") == 0, "status string");

  flashattn_attention_params p;
  memset(&p, 0xff, sizeof p);
  flashattn_attention_params_init(&p);
  CHECK(p.batch == 1 && p.heads_q == 1 && p.heads_kv == 1 && p.score.window_left == -1 &&
            p.score.window_right == -1 && p.mask.stride_col == 1 && p.q == NULL && !p.score.has_scale &&
            !p.score.causal && p.score.alibi_slopes == NULL && p.dtype == FLASHATTN_DTYPE_F32 && p.head_dim_v == 0 &&
            p.dropout_p == 0 && p.num_threads == 0,
        "attention_params_init");
  p.seqlen_q = 3, p.seqlen_k = 5, p.heads_q = 4, p.heads_kv = 2, p.head_dim = 8, p.head_dim_v = 6;
  flashattn_attention_params_set_contiguous_strides(&p);
  CHECK(p.q_strides.batch == 96 && p.q_strides.seq == 32 && p.q_strides.head == 8 && p.v_strides.seq == 12 &&
            p.o_strides.head == 6,
        "contiguous strides");
  flashattn_attention_params_set_head_major_strides(&p);
  CHECK(p.k_strides.batch == 80 && p.k_strides.seq == 8 && p.k_strides.head == 40, "head-major strides");
  flashattn_backward_params bp;
  flashattn_backward_params_init(&bp);
  bp.attention.seqlen_q = 3, bp.attention.seqlen_k = 5, bp.attention.head_dim = 8;
  flashattn_backward_params_set_head_major_strides(&bp);
  CHECK(bp.dk_strides.seq == 8 && bp.dk_strides.head == 40 && bp.attention.k_strides.head == 40, "backward strides");
  flashattn_decode_params dp;
  memset(&dp, 0xff, sizeof dp);
  flashattn_decode_params_init(&dp);
  CHECK(dp.batch == 1 && dp.score.window_left == -1 && dp.score.window_right == -1 && !dp.score.causal &&
            dp.num_splits == 0 && dp.block_table == NULL && !dp.quantize_query_int8 && !dp.quantize_probs_u8,
        "decode_params_init");
  flashattn_varlen_params vp;
  flashattn_varlen_params_init(&vp);
  CHECK(vp.heads_q == 1 && vp.score.window_left == -1 && vp.score.window_right == -1 && vp.batch == 0 &&
            vp.dropout_p == 0 && vp.dropout_seed == 0 && vp.dropout_offset == 0,
        "varlen_params_init");
  flashattn_merge_params mp;
  flashattn_merge_params_init(&mp);
  CHECK(mp.batch == 1 && mp.heads == 1 && mp.num_partials == 0, "merge_params_init");
  flashattn_attention_params_init(NULL); /* ignored */

  /* A failure in another thread leaves this thread's message alone. */
  CHECK(flashattn_validate_forward(NULL) == FLASHATTN_ERROR_INVALID_ARGUMENT, "validate NULL");
  char theirs[256] = {0};
  CHECK(flashattn_choose_num_splits(1, 10, 1, &(int64_t){0}) == FLASHATTN_OK, "%s", flashattn_last_error());
  thrd_t thread;
  CHECK(thrd_create(&thread, fail_in_thread, theirs) == thrd_success, "thrd_create");
  thrd_join(thread, NULL);
  CHECK(strstr(theirs, "params") != NULL, "the thread's message: %s", theirs);
  CHECK(strcmp(flashattn_last_error(), "") == 0, "this thread's message changed to '%s'", flashattn_last_error());
}

/* flashattn_lightning_indexer against a plain top-k of the scores (ties by lower position); values in 1/16ths make
 * every score exact. A bad top_k leaves the outputs untouched. */
static void test_lightning_indexer(void) {
  enum { Nq = 2, H = 2, d = 8, Nk = 30, K = 5 };
  float* q = random_array(Nq * H * d);
  float* k = random_array(Nk * d);
  float* w = random_array(Nq * H);
  int32_t indices[Nq * K];
  float scores[Nq * K];
  const int32_t seqlens[1] = {Nk};
  flashattn_indexer_params p;
  flashattn_indexer_params_init(&p);
  CHECK(p.causal && p.batch == 1 && p.heads == 1, "indexer defaults");
  p.q = q, p.k_cache = k, p.weights = w, p.key_indices = indices, p.scores = scores, p.cache_seqlens = seqlens;
  p.seqlen_q = Nq, p.heads = H, p.head_dim = d, p.cache_seqlen_max = Nk, p.top_k = K;
  flashattn_indexer_params_set_contiguous_strides(&p);
  CHECK(flashattn_lightning_indexer(&p) == FLASHATTN_OK, "lightning_indexer: %s", flashattn_last_error());
  for (int t = 0; t < Nq; ++t) {
    double I[Nk];
    int taken[Nk] = {0};
    const int seen = t + Nk - Nq + 1;
    for (int s = 0; s < seen; ++s) {
      I[s] = 0.0;
      for (int j = 0; j < H; ++j) {
        double dot = 0.0;
        for (int e = 0; e < d; ++e) dot += (double)q[(t * H + j) * d + e] * k[s * d + e];
        I[s] += w[t * H + j] * (dot < 0.0 ? 0.0 : dot);
      }
    }
    for (int slot = 0; slot < K; ++slot) {
      int best = -1;
      for (int s = 0; s < seen; ++s)
        if (!taken[s] && (best < 0 || I[s] > I[best])) best = s;
      taken[best] = 1;
      CHECK(indices[t * K + slot] == best, "indexer row %d slot %d: key %d, expected %d", t, slot,
            (int)indices[t * K + slot], best);
      CHECK(scores[t * K + slot] == (float)I[best], "indexer row %d slot %d: score %g, expected %g", t, slot,
            scores[t * K + slot], I[best]);
    }
  }
  int32_t untouched[Nq * K];
  for (int i = 0; i < Nq * K; ++i) untouched[i] = -7;
  p.key_indices = untouched, p.scores = NULL, p.top_k = 0;
  check_invalid(flashattn_lightning_indexer(&p), "top_k", "lightning_indexer top_k 0");
  for (int i = 0; i < Nq * K; ++i) CHECK(untouched[i] == -7, "a failed lightning_indexer wrote key_indices");
  p.top_k = K;
  CHECK(flashattn_validate_lightning_indexer(&p) == FLASHATTN_OK, "validate_lightning_indexer: %s",
        flashattn_last_error());
  free(q), free(k), free(w);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s EXPECTED_VERSION\n", argv[0]);
    return 2;
  }
  test_misc(argv[1]);
  test_forward();
  test_forward_errors();
  test_block_mask();
  test_selected_keys();
  test_varlen(0.0f);
  test_varlen(0.25f);
  test_decode();
  test_decode_values_in_keys();
  test_quantized_decode();
  test_lightning_indexer();
  test_merge();
  test_backward();
  test_sinks();
  test_block_position();
  test_working_memory();
  if (failures) {
    fprintf(stderr, "c_api_test: %d checks failed\n", failures);
    return 1;
  }
  printf("c_api_test: every check passed (flashattn %s)\n", flashattn_version());
  return 0;
}
