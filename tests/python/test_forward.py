"""flash_attn_func and flash_attn_backward against the float64 NumPy reference, within twice the error of a
same-precision standard implementation, over odd shapes, GQA, every mask and modifier, both dtypes."""

import tracemalloc

import numpy as np
import pytest

import flashattn
from reference import assert_drop_rate, attention, compare, max_error, split_modifiers

# (batch, Nq, Nk, Hq, Hkv, d, dv): odd head dims and lengths that hit every tail, Nq != Nk both ways, GQA.
SHAPES = [
    (1, 1, 1, 1, 1, 40, 40),
    (2, 97, 113, 4, 2, 59, 59),
    (1, 113, 97, 3, 1, 111, 111),
    (2, 33, 1, 2, 2, 40, 24),
]
MODIFIERS = {
    "plain": {},
    "causal": {"causal": True},
    "window": {"window_size": (8, 3)},
    "softcap": {"softcap": 3.0},
    "alibi": {"alibi": True},
    "all": {"causal": True, "window_size": (20, 0), "softcap": 5.0, "alibi": True, "softmax_scale": 0.3},
}


def make_inputs(rng, shape, dtype):
    b, Nq, Nk, Hq, Hkv, d, dv = shape
    q = rng.standard_normal((b, Nq, Hq, d)).astype(dtype)
    k = rng.standard_normal((b, Nk, Hkv, d)).astype(dtype)
    v = rng.standard_normal((b, Nk, Hkv, dv)).astype(dtype)
    dout = rng.standard_normal((b, Nq, Hq, dv)).astype(dtype)
    return q, k, v, dout


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mods", MODIFIERS.values(), ids=MODIFIERS.keys())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_backward_match_reference(rng, shape, mods, dtype):
    q, k, v, dout = make_inputs(rng, shape, dtype)
    kwargs, ref_kwargs = split_modifiers(
        mods, lambda: rng.uniform(0.05, 0.5, size=(shape[0], shape[3])).astype(np.float32)
    )
    out, lse, mask = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
    assert mask is None
    assert out.dtype == dtype and out.shape == shape[:2] + (shape[3], shape[6])
    assert lse.dtype == np.float32 and lse.shape == (shape[0], shape[3], shape[1])
    dq, dk, dv = flashattn.flash_attn_backward(dout, q, k, v, out, lse, **kwargs)
    for grad, x in ((dq, q), (dk, k), (dv, v)):
        assert grad.dtype == dtype and grad.shape == x.shape

    ref = attention(q, k, v, dout, **ref_kwargs)
    base = attention(q, k, v, dout, compute=np.float32, low=dtype, **ref_kwargs)
    compare({"o": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}, ref, base, dtype, ["o", "dq", "dk", "dv"])
    # LSE is float32 whatever the inputs: within the float32 baseline's error.
    base32 = attention(q, k, v, compute=np.float32, **ref_kwargs)
    assert max_error(lse, ref["lse"]) <= 2 * max_error(base32["lse"], ref["lse"]) + 1e-5


def test_rows_that_see_no_key_give_zero_output_and_minus_inf_lse(rng):
    # Bottom-right causal with Nq > Nk: query rows 0..Nq-Nk-1 see no key.
    q, k, v, dout = make_inputs(rng, (1, 7, 3, 2, 1, 16, 16), np.float32)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(out[:, :4] == 0) and np.all(lse[:, :, :4] == -np.inf)
    assert np.all(np.isfinite(lse[:, :, 4:]))
    dq, dk, dv = flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True)
    assert np.all(dq[:, :4] == 0)
    ref = attention(q, k, v, dout, causal=True)
    assert max_error(dk, ref["dk"]) < 1e-5


def numpy_allocation_peak(call):
    """(result, peak bytes) of call(), counting what tracemalloc sees: every array NumPy allocates."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_strided_views_are_used_in_place(rng):
    """Strided views reach the library without copies, checked three ways.

    1. Values: q, k, v as views into one packed (b, s, 3, h, d) array, and q as a transposed head-major
       array, give the bits of the call on contiguous copies (the strides are read right).
    2. No copy through NumPy: during the forward and the backward call on those views (1 MiB each),
       tracemalloc, to which NumPy reports every array it allocates, sees nothing beyond the returned
       arrays. A copy by the Python layer (np.ascontiguousarray, astype) or by a pybind11 conversion
       (array_t with forcecast) allocates through NumPy and would be counted (checked here too, so that the
       test fails rather than passes if NumPy stopped reporting). A copy that C++ code made into memory of
       its own would not be counted: this does not rule that out (arrays.cc hands py::array's pointer and
       strides to the library; the fused kernel's own scratch, packed K tiles, is not a NumPy allocation).
    3. Writes land in the caller's memory: flash_attn_with_kvcache appends into k_cache and v_cache given
       as views of every other row of two larger buffers, and the new rows appear in those buffers.
    """
    qkv = rng.standard_normal((2, 512, 3, 4, 64)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous and q.nbytes == 1 << 20
    contiguous = [np.ascontiguousarray(x) for x in (q, k, v)]
    expected, expected_lse, _ = flashattn.flash_attn_func(*contiguous, causal=True, return_attn_probs=True)

    slack = 64 << 10  # pybind11's and the call's small objects; far below one input's 1 MiB
    (out, lse, _), peak = numpy_allocation_peak(
        lambda: flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    )
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(lse, expected_lse)
    assert peak <= out.nbytes + lse.nbytes + slack, f"{peak} bytes allocated through NumPy"
    _, copy_peak = numpy_allocation_peak(lambda: np.ascontiguousarray(q))
    assert copy_peak >= q.nbytes, "tracemalloc does not see NumPy's allocations: this test checks nothing"

    dout = rng.standard_normal(out.shape).astype(np.float32)
    grads, peak = numpy_allocation_peak(
        lambda: flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True)
    )
    assert peak <= sum(g.nbytes for g in grads) + slack, f"{peak} bytes allocated through NumPy"
    expected_grads = flashattn.flash_attn_backward(dout, *contiguous, expected, expected_lse, causal=True)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_array_equal(g, e)

    head_major = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
    out_t = flashattn.flash_attn_func(head_major.transpose(0, 2, 1, 3), k, v, causal=True)
    np.testing.assert_array_equal(out_t, expected)

    k_buffer, v_buffer = (rng.standard_normal((2, 32, 2, 32)).astype(np.float32) for _ in range(2))
    k_before, v_before = k_buffer.copy(), v_buffer.copy()
    k_new = rng.standard_normal((2, 1, 2, 32)).astype(np.float32)
    v_new = rng.standard_normal((2, 1, 2, 32)).astype(np.float32)
    q_new = rng.standard_normal((2, 1, 4, 32)).astype(np.float32)
    # Cache rows 3 and 7 are buffer rows 6 and 14.
    flashattn.flash_attn_with_kvcache(
        q_new, k_buffer[:, ::2], v_buffer[:, ::2], k_new, v_new, cache_seqlens=np.array([3, 7])
    )
    for b, row in ((0, 6), (1, 14)):
        np.testing.assert_array_equal(k_buffer[b, row], k_new[b, 0])
        np.testing.assert_array_equal(v_buffer[b, row], v_new[b, 0])
        k_buffer[b, row], v_buffer[b, row] = k_before[b, row], v_before[b, row]
    np.testing.assert_array_equal(k_buffer, k_before)  # nothing else in the buffers changed
    np.testing.assert_array_equal(v_buffer, v_before)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dropout_mask_matches_output_and_gradients(rng, dtype):
    shape = (2, 37, 41, 2, 1, 24, 24)
    q, k, v, dout = make_inputs(rng, shape, dtype)
    p = 0.3
    out, lse, keep = flashattn.flash_attn_func(
        q, k, v, dropout_p=p, causal=True, return_attn_probs=True, seed=1234
    )
    assert keep.dtype == np.bool_ and keep.shape == (2, 2, 37, 41)
    # The same seed gives the same bits; the drop rate is p (binomial: within 6 standard deviations).
    again, _, keep_again = flashattn.flash_attn_func(
        q, k, v, dropout_p=p, causal=True, return_attn_probs=True, seed=1234
    )
    np.testing.assert_array_equal(out, again)
    np.testing.assert_array_equal(keep, keep_again)
    assert_drop_rate(keep, p)
    dq, dk, dv = flashattn.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=p, causal=True, seed=1234)
    kw = {"causal": True, "keep": keep, "dropout_p": p}
    ref = attention(q, k, v, dout, **kw)
    base = attention(q, k, v, dout, compute=np.float32, low=dtype, **kw)
    compare({"o": out, "dq": dq, "dk": dk, "dv": dv}, ref, base, dtype, ["o", "dq", "dk", "dv"])


def test_dropout_without_seed_draws_one_and_returns_its_mask(rng):
    q, k, v, _ = make_inputs(rng, (1, 16, 16, 1, 1, 16, 16), np.float32)
    out1, _, keep1 = flashattn.flash_attn_func(q, k, v, dropout_p=0.5, return_attn_probs=True)
    out2, _, keep2 = flashattn.flash_attn_func(q, k, v, dropout_p=0.5, return_attn_probs=True)
    assert not np.array_equal(keep1, keep2)  # two 64-bit draws: equal masks have probability 2^-256
    ref = attention(q, k, v, keep=keep1, dropout_p=0.5)
    assert max_error(out1, ref["o"]) < 1e-5


def numpy_draw(state_seed):
    """The dropout seed a call with seed=None draws right after np.random.seed(state_seed), and the value
    np.random.random() gives after that draw (the generator's state once the call returns)."""
    np.random.seed(state_seed)
    seed = int(np.random.randint(0, 2**64, dtype=np.uint64))
    return seed, np.random.random()


def test_dropout_seed_comes_from_numpys_global_generator(rng):
    q, k, v, dout = make_inputs(rng, (2, 19, 23, 2, 1, 16, 16), np.float32)
    seed, next_value = numpy_draw(42)
    np.random.seed(42)
    out, lse, keep = flashattn.flash_attn_func(q, k, v, dropout_p=0.4, causal=True, return_attn_probs=True)
    assert np.random.random() == next_value  # advanced by exactly the one documented draw
    # The mask of the drawn seed, given explicitly: the same bits, and the backward pass with it.
    explicit = flashattn.flash_attn_func(q, k, v, dropout_p=0.4, causal=True, return_attn_probs=True, seed=seed)
    np.testing.assert_array_equal(keep, explicit[2])
    np.testing.assert_array_equal(out, explicit[0])
    np.random.seed(42)  # np.random.seed reproduces the call
    np.testing.assert_array_equal(flashattn.flash_attn_func(q, k, v, dropout_p=0.4, causal=True), out)
    dq, dk, dv = flashattn.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=0.4, causal=True, seed=seed)
    kw = {"causal": True, "keep": keep, "dropout_p": 0.4}
    ref = attention(q, k, v, dout, **kw)
    base = attention(q, k, v, dout, compute=np.float32, low=np.float32, **kw)
    compare({"o": out, "dq": dq, "dk": dk, "dv": dv}, ref, base, np.float32, ["o", "dq", "dk", "dv"])
    assert_drop_rate(keep, 0.4)


def test_calls_without_dropout_leave_numpys_generator_alone(rng):
    q, k, v, _ = make_inputs(rng, (1, 8, 8, 1, 1, 16, 16), np.float32)
    np.random.seed(7)
    expected = np.random.random()
    np.random.seed(7)
    flashattn.flash_attn_func(q, k, v)
    flashattn.flash_attn_func(q, k, v, dropout_p=0.3, seed=5)  # an explicit seed draws nothing either
    flashattn.scaled_dot_product_attention(*(x.transpose(0, 2, 1, 3) for x in (q, k, v)))
    assert np.random.random() == expected


def test_backward_is_deterministic(rng):
    q, k, v, dout = make_inputs(rng, (2, 65, 70, 4, 2, 40, 40), np.float32)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    first = flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
    second = flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True, deterministic=True)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_import_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, flashattn; assert 'torch' not in sys.modules, 'flashattn imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_compute_releases_the_gil_and_threads_agree(rng):
    import threading
    import time

    q, k, v, _ = make_inputs(rng, (2, 2048, 2048, 4, 4, 64, 64), np.float32)
    start = time.perf_counter()
    serial = flashattn.flash_attn_func(q, k, v)
    duration = time.perf_counter() - start
    results = []
    worker = threading.Thread(target=lambda: results.append(flashattn.flash_attn_func(q, k, v)))
    # While the call computes, this thread keeps running Python: the largest pause between two of its loop
    # iterations stays far below the call's duration (it would span the whole call if the GIL were held).
    last, longest_pause = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():
        now = time.perf_counter()
        longest_pause, last = max(longest_pause, now - last), now
    worker.join()
    assert longest_pause < duration / 2, f"paused {longest_pause:.3f} s during a {duration:.3f} s call"
    np.testing.assert_array_equal(results[0], serial)
