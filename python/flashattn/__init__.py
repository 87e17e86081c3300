"""flashattn: exact, IO-aware attention on the CPU, with flash-attn's and PyTorch's Python conventions.

NumPy arrays in, NumPy arrays out. The functions follow the flash-attn package (``flash_attn_func``,
``flash_attn_varlen_func``, ``flash_attn_with_kvcache``) and
``torch.nn.functional.scaled_dot_product_attention``; ``flashattn.torch`` offers the same functions for
``torch.Tensor`` with autograd. Importing ``flashattn`` does not import torch.

Arrays and copies
    Q, K, V (and dout, out) are float32 or float16 and are used in place, without copies, whatever their
    strides, as long as the last dimension is contiguous and every stride is a whole number of elements;
    otherwise the call raises Error (pass ``numpy.ascontiguousarray(x)``). Outputs are new C-contiguous
    arrays. The small side arrays are converted when needed (a copy only then): ``alibi_slopes`` and rotary
    tables to float32, ``cu_seqlens``, ``cache_seqlens`` and ``block_table`` to int32 (their values must fit),
    ``attn_mask`` to float32 unless it is bool; ``merge_attention_states`` stacks its partials into one
    float32 array. The compute runs with the GIL released, on all cores.

Errors
    A wrong element type is a TypeError; wrong ranks, shapes, strides and values raise ``flashattn.Error``,
    whose message names the argument and the values. ``Error`` is a subclass of both ValueError and
    RuntimeError (what flash-attn's checks raise), so either ``except`` catches it. Nothing passed in is
    modified by a call that raises (``flash_attn_with_kvcache`` checks everything before it writes the cache).

Conventions
    ``softmax_lse`` is float32 (batch, heads_q, seqlen_q), natural log, −inf for a row that sees no key (its
    output is 0). ``causal`` is aligned bottom-right as in flash-attn (query i sees key j ≤ i + Nk − Nq);
    ``scaled_dot_product_attention`` aligns it top-left as PyTorch does. Dropout is Philox-based and keyed by
    ``seed``; the same seed gives the same mask in the forward and the backward pass, where the fused kernels
    regenerate it instead of storing it. ``seed=None`` with ``dropout_p > 0`` draws the seed from NumPy's
    global generator (``np.random.seed`` reproduces it; ``flashattn.torch`` draws from torch's).
    ``deterministic`` is accepted for compatibility: the backward pass is deterministic by construction.

Working memory
    A call takes its working memory (packed K and V, each thread's tiles) before it writes anything and
    gives it back when it returns; the calling thread keeps it for its next call, up to
    ``working_memory_limit()`` bytes (64 MiB unless set), until it ends. ``set_working_memory_limit`` bounds
    what every thread keeps, ``release_working_memory`` frees it.
"""

from . import _arguments, _block_mask, _core, _kvcache
from ._block_mask import BlockMask
from ._core import Error

# The library's version, the CMake project version (as the package metadata's).
__version__ = _core.__version__

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "quantize_kv",
    "lightning_indexer",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "merge_attention_states",
    "scaled_dot_product_attention",
    "BlockMask",
    "create_block_mask",
    "set_working_memory_limit",
    "working_memory_limit",
    "release_working_memory",
    "retained_working_memory",
    "Error",
]


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *, seed=None,
        sinks=None, block_mask=None, document_ids=None, key_indices=None):
    """Attention of q over k, v in flash-attn's (batch, seqlen, heads, dim) layout.

    q (batch, seqlen_q, heads_q, d), k (batch, seqlen_k, heads_kv, d), v (batch, seqlen_k, heads_kv, dv),
    float32 or float16, used without copies (see the module docstring). heads_kv divides heads_q
    (grouped-query attention: query head h uses K/V head h // (heads_q // heads_kv)).

    softmax_scale: default 1/sqrt(d). causal: bottom-right aligned. window_size (left, right): query i sees
    keys i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right, −1 = unbounded. softcap > 0: S ← softcap·tanh(S /
    softcap). alibi_slopes: float32 (heads_q,) or (batch, heads_q), S += −slope·|i + Nk − Nq − j|.
    dropout_p: probability of dropping an element of P (kept ones scaled by 1/(1 − p)), keyed by seed
    (None: one np.random.randint(0, 2**64, dtype=np.uint64) draw from NumPy's global generator, so that
    np.random.seed reproduces it); regenerated inside the fused kernel, never stored.
    deterministic: accepted; every pass is deterministic.
    sinks: attention sinks, float32 (heads_q,): a logit per query head in every row's softmax denominator,
    without a value (softmax_lse = log(Σ_j e^{S_ij} + e^{sinks[h]})); each finite or −inf (no sink).
    block_mask: a flashattn.BlockMask (create_block_mask, or FlexAttention's lists): only its listed key
    blocks are visited; causal, window_size and document_ids mask the elements of its partial blocks and
    none of its full blocks (docs/sparse_attention.md). document_ids: integer (batch, seqlen_k) (int32):
    query i (at key position i + Nk − Nq, so Nq ≤ Nk) sees key j only within its document.
    key_indices: attention over selected keys (DeepSeek-V3.2's sparse attention), integer (batch, seqlen_q,
    heads_kv, k) converted to int32: query row i of K/V head g attends exactly the keys key_indices[b, i, g, :]
    (−1 = unused slot, any order, no position twice), each one it sees (within seqlen_k, the causal diagonal and
    the window, else Error); a row with no keys gets out 0 and softmax_lse −inf (or its sink). ALiBi's
    distances are those of the listed positions. Not with dropout, and without a backward pass
    (docs/sparse_attention.md).

    Returns out (batch, seqlen_q, heads_q, dv) of q's dtype, or with return_attn_probs=True the tuple
    (out, softmax_lse, dropout_mask): softmax_lse float32 (batch, heads_q, seqlen_q), natural log;
    dropout_mask bool (batch, heads_q, seqlen_q, seqlen_k), True where P was kept, or None when dropout_p
    is 0.
    """
    call = _arguments.call_of(locals())
    probs = bool(call.return_attn_probs)
    m = _arguments.modifiers(call)
    _block_mask.apply(call, m)
    out, lse, keep = _core.forward(
        call.q, call.k, call.v, modifiers=m, return_lse=probs, return_dropout_mask=probs,
        key_indices=_arguments.key_indices(call.key_indices, 4),
    )
    return (out, lse, keep) if probs else out


def flash_attn_backward(dout, q, k, v, out, softmax_lse, dropout_p=0.0, softmax_scale=None, causal=False,
        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, *, seed=None, sinks=None,
        block_mask=None, document_ids=None):
    """Gradients (dq, dk, dv) of flash_attn_func for the incoming gradient dout (batch, seqlen_q, heads_q,
    dv).

    q, k, v and every keyword as given to the forward call; out and softmax_lse as it returned them (run it
    with return_attn_probs=True). With dropout_p > 0 the forward call's seed is required. The gradients are
    new arrays of q's dtype and the shapes of q, k, v; dk and dv are summed over the query heads sharing a
    K/V head. No gradient flows to alibi_slopes. With sinks (as given to the forward call) it returns
    (dq, dk, dv, dsinks), dsinks float32 (heads_q,) = −Σ_{b,i} e^{sinks[h] − lse}·rowsum(dout ∘ out).
    Deterministic: the same inputs give the same bits.
    """
    call = _arguments.call_of(locals())
    m = _arguments.modifiers(call, seed_required=True)
    _block_mask.apply(call, m)
    return _core.backward(call.dout, call.q, call.k, call.v, call.out, call.softmax_lse, modifiers=m)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
        softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
        deterministic=False, return_attn_probs=False, block_table=None, *, seed=None, sinks=None, seqused_k=None,
        k_scale=None, v_scale=None, cache_dtype=None, key_indices=None):
    """flash_attn_func over sequences of different lengths packed along one token axis.

    q (total_q, heads_q, d), k (total_k, heads_kv, d), v (total_k, heads_kv, dv); cu_seqlens_q and
    cu_seqlens_k (batch + 1,) integer offsets (converted to int32 if needed): sequence b owns rows
    [cu_seqlens[b], cu_seqlens[b + 1]), starting at 0, non-decreasing, ending at total; each length at most
    max_seqlen_q / max_seqlen_k. Masks align per sequence. alibi_slopes may be (batch, heads_q).
    Arrays with a zero stride (numpy.broadcast_to) are rejected. With dropout_p > 0 the sequences are
    computed one by one (sequence b's dropout stream at offset b of the seed's). Returns out
    (total_q, heads_q, dv), or with return_attn_probs=True (out, softmax_lse (heads_q, total_q), masks):
    masks is a list of one bool (heads_q, seqlen_q_b, seqlen_k_b) keep mask per sequence, or None when
    dropout_p is 0.

    With block_table (batch, max_blocks) integer page numbers, k and v are paged KV caches (num_blocks,
    page_block_size, heads_kv, d) and sequence b's queries attend its first keys of the cache (vLLM's and
    flash-attn's paged varlen call, docs/python.md): as many as seqused_k[b] (vLLM) or cu_seqlens_k[b + 1] −
    cu_seqlens_k[b] (flash-attn), exactly one of the two given (the other None); max_seqlen_k is then not
    read. The queries are the last positions of each sequence (causal and windows bottom-right per
    sequence). Nothing is appended; dropout_p must be 0. The caches may be quantized as in
    flash_attn_with_kvcache (k_scale, v_scale, cache_dtype), and v=None reads V inside k (head_dim_v = d).
    key_indices (total_q, heads_kv, k), with block_table only: each packed query row's selected keys, as in
    flash_attn_with_kvcache.
    """
    call = _arguments.call_of(locals())
    probs = bool(call.return_attn_probs)
    if call.block_table is not None:
        out, lse = _kvcache.varlen_kvcache(call)
        return (out, lse, None) if probs else out
    _arguments.reject_cache_keywords(call)
    m = _arguments.modifiers(call)
    out, lse, keep = _core.varlen_forward(
        call.q, call.k, call.v, **_arguments.packed_sequences(call), modifiers=m, return_dropout_mask=probs
    )
    return (out, lse, keep) if probs else out


def flash_attn_varlen_backward(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        alibi_slopes=None, deterministic=False, *, seed=None, sinks=None):
    """Gradients (dq, dk, dv) of flash_attn_varlen_func; out and softmax_lse (heads_q, total_q) as it returned
    them (return_attn_probs=True), the forward call's seed when dropout_p > 0. Computed sequence by sequence;
    deterministic. With sinks: (dq, dk, dv, dsinks), dsinks summed over the sequences."""
    call = _arguments.call_of(locals())
    m = _arguments.modifiers(call, seed_required=True)
    arrays = (call.dout, call.q, call.k, call.v, call.out, call.softmax_lse)
    return _core.varlen_backward(*arrays, **_arguments.packed_sequences(call), modifiers=m)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
        cache_seqlens=None, block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, k_scale=None,
        v_scale=None, cache_dtype=None, *, sinks=None, head_dim_v=None, quantize_query_int8=False,
        quantize_probs_u8=False, key_indices=None, block_mask=None, document_ids=None):
    """Attention of a few new queries over a key/value cache, appending k and v to the cache in place.

    q (batch, seqlen_q, heads_q, d). Contiguous cache: k_cache, v_cache (batch, seqlen_cache, heads_kv, d).
    Paged cache: k_cache, v_cache (num_blocks, page_block_size, heads_kv, d) and block_table (batch,
    max_blocks) integer page numbers (any page_block_size ≥ 1). k_cache and v_cache must share their strides.
    cache_seqlens: int or (batch,) integers, the keys already cached; None = the cache is full.
    k, v (batch, seqlen_new, heads_kv, d), optional: rotated (if rotary tables are given) and written into
    the caches at positions cache_seqlens[b] + i, which must fit (the caches must then be writable); the
    queries then attend to cache_seqlens[b] + seqlen_new keys, the queries being the last positions (causal
    and window aligned so). rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2), converted to float32:
    applied to k at positions cache_seqlens[b] + i and, as in flash-attn, to q at cache_seqlens[b] + i when
    causal or a window is set, else to every query at cache_seqlens[b]; GPT-J pairs when rotary_interleaved,
    else GPT-NeoX halves. Without k (nothing appended) the queries are rotated by the same rule.
    num_splits: key chunks computed in parallel and merged by LSE, 0 = heuristic.
    sinks: float32 (heads_q,) attention sinks as in flash_attn_func, added once per row however the keys
    are split. v_cache=None reads V inside the keys (multi-head latent attention): V is the first
    head_dim_v (default d) features of each k_cache row, nothing stored twice; appends then pass k only
    (v=None), which writes each row once.

    The cache may hold another float type than q (float32 queries over a float16 cache), or be quantized
    (docs/quantized_cache.md): int8 arrays, or uint8 arrays of FP8 bytes with cache_dtype="fp8_e4m3" or
    "fp8_e5m2", with float32 k_scale and v_scale of one shape: (batch or num_blocks, seqlen_cache or page_block_size,
    heads_kv) per token, with a last axis of head_dim / group_size per group of features, (heads_kv,) per
    K/V head, or () per tensor. Appended k and v (of q's type, finite) are quantized into the cache,
    rounding to nearest even and saturating; per-token scales are written for them (max|x| / 127 for int8,
    / 448 for FP8 E4M3, / 57344 for FP8 E5M2). quantize_kv makes such a cache from float values. With v_cache=None (V inside the keys)
    k_scale scales V too and v_scale must be None; a group_size must then divide head_dim_v as well.
    quantize_query_int8=True (int8 caches only) computes the scores as exact int8 dot products of the cache
    with each query row rounded to int8 per scale group (AVX-512 VNNI where the CPU has it): faster, adding
    q's rounding error.
    quantize_probs_u8=True (int8 caches with one scale per row, no group_size) computes P̃V as integer dot
    products of the cache with the weights P̃ · v_scale rounded to 8 bits per key block: faster, adding
    their rounding error.
    key_indices: attention over selected keys, integer (batch, seqlen_q, heads_kv, k) converted to int32, as in
    flash_attn_func: positions of each sequence after this call's append (logical ones, before block_table),
    each one the row sees (< cache_seqlens[b] + seqlen_new, on the causal diagonal and window).
    block_mask, document_ids: as in flash_attn_func, in this call's coordinates: sequence b has Nk_b =
    cache_seqlens[b] + seqlen_new keys and its queries at the last seqlen_q positions; the BlockMask's lists are
    (batch, heads, ceil(seqlen_q / block_size_q), width) over key blocks of positions j // block_size_k
    (logical, before block_table), each < ceil(Nk_b / block_size_k). document_ids: integer (batch, capacity)
    (int32) over the cache's positions (capacity = seqlen_cache, or max_blocks · page_block_size when paged),
    query row i taking the id at position i + Nk_b − seqlen_q. Not with key_indices.

    Returns out (batch, seqlen_q, heads_q, dv), or (out, softmax_lse (batch, heads_q, seqlen_q)) with
    return_softmax_lse=True. Everything is checked before the caches are written: a call that raises leaves
    them unchanged.
    """
    call = _arguments.call_of(locals())
    out, lse = _kvcache.kvcache(call)
    return (out, lse) if call.return_softmax_lse else out


def quantize_kv(x, dtype="int8", group_size=None, granularity=None):
    """Quantizes x (batch or num_blocks, seqlen, heads_kv, head_dim), float32 or float16, into a cache for
    flash_attn_with_kvcache: returns (values, scales).

    dtype "int8" (values int8), "fp8_e4m3" or "fp8_e5m2" (values uint8 holding FP8 bytes). granularity
    "per_token" (scales (batch, seqlen, heads_kv), or (…, head_dim / group_size) with group_size), "per_head"
    (scales (heads_kv,)) or "per_tensor" (scales ()); None = per token for int8 or with a group_size, else per
    head for fp8. Each scale is max|x| / 127 (int8), / 448 (fp8_e4m3) or / 57344 (fp8_e5m2) over the values it
    covers, 0 when they are all 0, and each value round(x / scale) to nearest even, saturating. x must be
    finite.
    """
    return _kvcache.quantize_kv(_arguments.call_of(locals()))


def lightning_indexer(q_index, k_index, weights, top_k, *, cache_seqlens=None, block_table=None, causal=True,
        k_scale=None, cache_dtype=None, return_scores=False):
    """DeepSeek-V3.2's lightning indexer: for each query row t the top_k keys s by
    I[t, s] = sum_j weights[t, j] * ReLU(q_index[t, j] . k_index[s]).

    q_index (batch, seqlen_q, heads, head_dim), float32 or float16, used through its strides. k_index one key
    head: contiguous (batch, seqlen_k, 1, head_dim), or paged (num_blocks, page_block_size, 1, head_dim) with
    block_table (batch, max_blocks) integer page numbers; float32 or float16 (any float type, not necessarily
    q_index's), or quantized: int8, or uint8 FP8 bytes with cache_dtype "fp8_e4m3" or "fp8_e5m2", each key row
    times its float32 k_scale (batch or num_blocks, seqlen_k or page_block_size). A (batch, seqlen_k, head_dim)
    cache is k_index[:, :, None]. weights (batch, seqlen_q, heads), converted to float32: every scale factor
    is folded into it (docs/sparse_attention.md gives DeepSeek's). cache_seqlens: (batch,) integers, the keys
    of each sequence; None = seqlen_k (contiguous only). causal: row t of Nq rows over Nk keys sees the keys
    s <= t + Nk - Nq; otherwise all Nk.

    Returns key_indices (batch, seqlen_q, 1, top_k) int32: the kept keys' positions by descending score, ties
    by ascending position, -1 beyond the keys a row sees; with return_scores=True, (key_indices, scores),
    scores float32 of the same shape (-inf in the unused slots). A NaN score ranks below every number.
    """
    call = _arguments.call_of(locals())
    key_indices, scores = _kvcache.lightning_indexer(call)
    return (key_indices, scores) if call.return_scores else key_indices


def merge_attention_states(outs, lses):
    """Merges partial attention results over disjoint key sets by their log-sum-exp.

    outs: list of (batch, seqlen, heads, dv) arrays, lses: list of float32 (batch, heads, seqlen) arrays,
    each pair as flash_attn_func(..., return_attn_probs=True) returns it (out, softmax_lse). The partials
    are stacked into float32 arrays (a copy). Returns (out, lse): out of the partials' dtype,
    lse = log Σ exp(lse_k), out = Σ exp(lse_k − lse)·out_k; a row that no partial saw is 0 with lse −inf.
    """
    o_partials, lse_partials, like = _arguments.merge_partials(outs, lses)
    return _core.merge(o_partials, lse_partials, like=like)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
        scale=None, enable_gqa=False, *, seed=None):
    """torch.nn.functional.scaled_dot_product_attention's semantics on NumPy arrays.

    query (batch, heads, L, E), key (batch, heads_kv, S, E), value (batch, heads_kv, S, Ev), float32 or
    float16, used without copies through their strides (the last dimension contiguous). is_causal: query i
    sees key j ≤ i (aligned top-left, as PyTorch; for L ≠ S this differs from flash_attn_func's causal).
    attn_mask: broadcastable to (batch, heads, L, S); bool (True = take part) or float (added to the scores,
    converted to float32); not together with is_causal. A row that sees no key gives 0 (as PyTorch ≥ 2.5).
    scale: default 1/sqrt(E). enable_gqa: heads_kv may divide heads (query head h uses K/V head
    h // (heads // heads_kv), as repeat_interleave does); otherwise the head counts must agree.
    dropout_p with seed (None: drawn) as in flash_attn_func. Returns (batch, heads, L, Ev) of query's dtype.
    """
    call = _arguments.call_of(locals())
    options = _arguments.sdpa_options(call, _arguments.sdpa_mask(call))
    out, _ = _core.sdpa_forward(call.query, call.key, call.value, **options)
    return out


def create_block_mask(seqlen_q, seqlen_k, *, batch=1, heads=1, block_size=128, causal=False, window_size=(-1, -1),
        document_ids=None):
    """The BlockMask of causal, window_size and document_ids masks, for flash_attn_func's block_mask.

    seqlen_q, seqlen_k: the call's lengths; block_size: an int or (block_size_q, block_size_k);
    document_ids: integer (batch, seqlen_k) (int32), query i at key position i + seqlen_k − seqlen_q.
    Bottom-right aligned, as flash_attn_func. A key block is full for a query block when every element of the
    pair is visible, partial when some but not all are, left out when none is; lists sorted ascending, heads
    copies of one mask (batch, heads, ...). Pass the same causal, window_size and document_ids to the call:
    they mask the elements of the partial blocks.
    """
    return _block_mask.create_block_mask(seqlen_q, seqlen_k, batch=batch, heads=heads, block_size=block_size,
                                         causal=causal, window_size=window_size, document_ids=document_ids)


def set_working_memory_limit(bytes_per_thread):
    """Sets how many bytes of working memory each calling thread keeps between calls (64 MiB unless set) and
    trims what every thread keeps to it at once; 0 keeps nothing, so every call allocates afresh.

    A call takes its working memory (packed K and V, each thread's tiles) before it writes anything and gives
    it back when it returns; the thread that made the call keeps it for its next one, which so finds it
    mapped instead of page-faulting fresh memory. A process whose T threads call flashattn keeps at most
    T · bytes_per_thread bytes between calls. One limit for the whole process (flashattn.torch's too).
    """
    _core.set_working_memory_limit(bytes_per_thread=_arguments.byte_count(bytes_per_thread, "bytes_per_thread"))


def working_memory_limit():
    """The bytes of working memory each calling thread may keep between calls (set_working_memory_limit)."""
    return _core.working_memory_limit()


def release_working_memory():
    """Frees the working memory every thread keeps between calls; the limit stays."""
    _core.release_working_memory()


def retained_working_memory():
    """The bytes of working memory all threads keep between calls now, together."""
    return _core.retained_working_memory()
