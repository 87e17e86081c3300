"""Each parameter of the public functions against the C++ field it sets, for test_keyword_fields.py
(flashattn) and test_torch_keyword_fields.py (flashattn.torch).

flashattn._core's echo (python/src/echo.h) makes a call raise, instead of running, with every field of the
parameter struct it would pass to the library. For every public function, each required parameter must
show in the echo of a plain call (an array at its own address, a size as given), and each keyword, changed
alone from that call, must change exactly the fields this table names, to the values it names. A parameter
of a signature that the table lacks fails the test: a new keyword is added here, with the field it reaches.
"""

import contextlib
import dataclasses
import inspect

import numpy as np

import flashattn
from flashattn import _core

B, NQ, NK, HQ, HKV, D = 2, 3, 5, 4, 2, 8  # batch, query rows, keys, heads, K/V heads, head dim
NMAX, PAGE, PAGES = 16, 8, 4  # decode: cache rows; paged cache: page size and pages
CU_Q, CU_K = [0, 2, 6], [0, 4, 9]  # varlen: two sequences of 2 and 4 query rows, 4 and 5 keys


class Address:
    """The echoed pointer is the memory of the array named `name` in the call (no copy was made)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Address({self.name})"


SET = "set"  # the echoed pointer is not null (memory the binding made: an output, a copy)


@dataclasses.dataclass
class Variation:
    """The call with `change` applied (on top of `base`, which both calls take) sets exactly `fields`. With
    `switches` the change sends the call to another parameter struct (flash_attn_varlen_func's block_table:
    decode's): the fields are then checked on that struct, which the other call does not have."""

    change: dict
    fields: dict
    base: dict = dataclasses.field(default_factory=dict)
    switches: bool = False


@contextlib.contextmanager
def echoed():
    _core._ParametersEcho.enabled = True
    try:
        yield
    finally:
        _core._ParametersEcho.enabled = False


def echo(function, arguments):
    """The fields of the parameter struct function(**arguments) would pass to the library."""
    with echoed():
        try:
            function(**arguments)
        except _core._ParametersEcho as raised:
            return raised.args[0]
    raise AssertionError(f"{function.__name__} returned without reaching the library")


def is_pointer(value):
    return isinstance(value, tuple) and value[0] == "address"


def matches(value, expected, arguments, arrays):
    if isinstance(expected, Address):
        return is_pointer(value) and value[1] == arrays.address(arguments[expected.name])
    if expected is SET:
        return is_pointer(value) and value[1] != 0
    return value == expected


def differing(before, after, exact):
    """The fields whose values differ; a pointer not in `exact` differs only by becoming or ceasing to be null
    (each call allocates its outputs anew)."""
    names = set()
    for name, value in before.items():
        if is_pointer(value) and name not in exact:
            if (value[1] == 0) != (after[name][1] == 0):
                names.add(name)
        elif after[name] != value:
            names.add(name)
    return names


def check_fields(fields, expected, arguments, arrays, what):
    for name, value in expected.items():
        assert name in fields, f"{what}: the echo has no field {name}"
        assert matches(fields[name], value, arguments, arrays), (
            f"{what}: field {name} is {fields[name]}, expected {value}"
        )


def check(module, name, arrays):
    """Every parameter of module.name reaches the fields SPECS gives it."""
    function = getattr(module, name)
    spec = SPECS[name](arrays)
    parameters = inspect.signature(function).parameters
    required = {p for p, info in parameters.items() if info.default is inspect.Parameter.empty}
    assert required == set(spec["required"]), f"{name}: the table's required parameters"
    keywords = set(parameters) - required
    assert keywords == set(spec["keywords"]), f"{name}: the table's keywords"
    arguments = spec["call"]
    plain = echo(function, arguments)
    for parameter, fields in spec["required"].items():
        check_fields(plain, fields, arguments, arrays, f"{name}({parameter}=...)")
    for variations in spec["keywords"].values():
        for variation in variations:
            before_arguments = {**arguments, **variation.base}
            after_arguments = {**before_arguments, **variation.change}
            what = f"{name}({', '.join(variation.change)} changed)"
            before, after = echo(function, before_arguments), echo(function, after_arguments)
            if variation.switches:
                check_fields(after, variation.fields, after_arguments, arrays, what)
                continue
            changed = differing(before, after, variation.fields)
            expected = sorted(variation.fields)
            assert changed == set(expected), f"{what}: the fields that changed are {sorted(changed)}, not {expected}"
            check_fields(after, variation.fields, after_arguments, arrays, what)


def same(*parameters, prefix=""):
    """Each array parameter at its own address in the field of its name."""
    return {parameter: {prefix + parameter: Address(parameter)} for parameter in parameters}


# ---- The score settings, dropout and sinks every attention function shares ---------------------------------


def score_keywords(arrays, prefix="", causal="causal", scale="softmax_scale"):
    return {
        scale: [Variation({scale: 0.5}, {prefix + "scale": 0.5})],
        causal: [Variation({causal: True}, {prefix + "causal": True})],
        "window_size": [
            Variation({"window_size": (3, 1)}, {prefix + "window_left": 3, prefix + "window_right": 1})
        ],
        "softcap": [Variation({"softcap": 2.0}, {prefix + "softcap": 2.0})],
        "alibi_slopes": [
            Variation({"alibi_slopes": arrays.float32(HQ)}, {prefix + "alibi_slopes": Address("alibi_slopes")}),
            Variation(
                {"alibi_slopes": arrays.float32(B, HQ)},
                {prefix + "alibi_slopes": Address("alibi_slopes"), prefix + "alibi_batch_stride": HQ},
            ),
        ],
    }


def training_keywords(arrays, prefix=""):
    """dropout_p, seed, deterministic and sinks of the forward and backward functions."""
    return {
        "dropout_p": [
            Variation({"dropout_p": 0.25, "seed": 7}, {prefix + "dropout_p": 0.25, prefix + "dropout_seed": 7})
        ],
        "seed": [Variation({"seed": 12345}, {prefix + "dropout_seed": 12345})],
        "deterministic": [Variation({"deterministic": True}, {})],  # accepted: every pass is deterministic
        "sinks": [Variation({"sinks": arrays.float32(HQ)}, {prefix + "sinks": Address("sinks")})],
    }


def selected_keys(arrays, *rows):
    """key_indices of three slots per (row, K/V head), rows of the given leading shape."""
    return arrays.int32(np.full((*rows, HKV, 3), -1, dtype=np.int32).tolist())


def selected_fields():
    return {"key_indices.indices": Address("key_indices"), "key_indices.count": 3}


# ---- The functions -----------------------------------------------------------------------------------------


def sparsity_keywords(arrays, prefix=""):
    """block_mask and document_ids of flash_attn_func and its backward: a BlockMask of blocks (2, 2), one
    head, over NQ = 3 query rows (2 query blocks) and NK = 5 keys (3 key blocks)."""
    ones, zeros = np.ones((B, 1, 2), np.int32), np.zeros((B, 1, 2, 3), np.int32)
    mask = flashattn.BlockMask(ones, zeros, ones, zeros + 1, block_size=(2, 2))
    listed = {
        prefix + "block_mask.block_size_q": 2, prefix + "block_mask.block_size_k": 2,
        prefix + "block_mask.kv_num_blocks": SET, prefix + "block_mask.kv_indices": SET,
        prefix + "block_mask.kv_width": 3, prefix + "block_mask.full_kv_num_blocks": SET,
        prefix + "block_mask.full_kv_indices": SET, prefix + "block_mask.full_kv_width": 3,
    }
    ids = arrays.int32([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]])
    return {
        "block_mask": [Variation({"block_mask": mask}, listed)],
        "document_ids": [Variation({"document_ids": ids}, {prefix + "document_ids": Address("document_ids")})],
    }


def forward_spec(arrays):
    f = arrays.float32
    # flashattn.torch always asks for the LSE, which its backward pass reads.
    lse = {} if arrays.torch else {"lse": SET}
    return {
        "call": {"q": f(B, NQ, HQ, D), "k": f(B, NK, HKV, D), "v": f(B, NK, HKV, D)},
        "required": same("q", "k", "v"),
        "keywords": {
            **score_keywords(arrays),
            **training_keywords(arrays),
            **sparsity_keywords(arrays),
            "return_attn_probs": [Variation({"return_attn_probs": True}, lse)],
            "key_indices": [Variation({"key_indices": selected_keys(arrays, B, NQ)}, selected_fields())],
        },
    }


def backward_spec(arrays):
    f = arrays.float32
    keywords = {
        **score_keywords(arrays, "attention."), **training_keywords(arrays, "attention."),
        **sparsity_keywords(arrays, "attention."),
    }
    keywords["sinks"] = [Variation({"sinks": f(HQ)}, {"attention.sinks": Address("sinks"), "dsinks": SET})]
    return {
        "call": {
            "dout": f(B, NQ, HQ, D), "q": f(B, NQ, HQ, D), "k": f(B, NK, HKV, D), "v": f(B, NK, HKV, D),
            "out": f(B, NQ, HQ, D), "softmax_lse": f(B, HQ, NQ),
        },
        "required": {
            **same("q", "k", "v", prefix="attention."),
            "dout": {"d_o": Address("dout")},
            "out": {"attention.o": Address("out")},
            "softmax_lse": {"attention.lse": Address("softmax_lse")},
        },
        "keywords": keywords,
    }


def packed_sequences(arrays):
    return {
        "cu_seqlens_q": arrays.int32(CU_Q), "cu_seqlens_k": arrays.int32(CU_K), "max_seqlen_q": 4, "max_seqlen_k": 5,
    }


def packed_required(prefix=""):
    return {
        **same("cu_seqlens_q", "cu_seqlens_k", prefix=prefix),
        "max_seqlen_q": {prefix + "max_seqlen_q": 4},
        "max_seqlen_k": {prefix + "max_seqlen_k": 5},
    }


def varlen_cache_keywords(arrays):
    """flash_attn_varlen_func over a paged cache (block_table): decode's packed queries."""
    f = arrays.float32
    paged = {"k": f(PAGES, PAGE, HKV, D), "v": f(PAGES, PAGE, HKV, D), "block_table": arrays.int32([[0, 1], [2, 3]])}
    paged_fields = {
        "q": Address("q"), "k_cache": Address("k"), "v_cache": Address("v"), "block_table": Address("block_table"),
        "cu_seqlens_q": Address("cu_seqlens_q"), "cache_seqlens": SET, "batch": B, "seqlen_q": 4, "seqlen_new": 0,
        "max_pages": 2, "num_pages": PAGES, "page_size": PAGE, "q_strides.batch": 0, "o_strides.batch": 0,
    }
    int8 = {
        "k": arrays.int8(PAGES, PAGE, HKV, D), "v": arrays.int8(PAGES, PAGE, HKV, D),
        "k_scale": f(HKV), "v_scale": f(HKV),
    }
    int8_fields = {
        "cache_element": "int8", "scale_granularity": "per_head", "k_scale": Address("k_scale"),
        "v_scale": Address("v_scale"),
    }
    fp8 = {
        "k": arrays.uint8(PAGES, PAGE, HKV, D), "v": arrays.uint8(PAGES, PAGE, HKV, D),
        "k_scale": f(HKV), "v_scale": f(HKV), "cache_dtype": "fp8_e4m3",
    }
    fp8_fields = {**int8_fields, "cache_element": "fp8_e4m3"}
    return {
        "block_table": [Variation(paged, paged_fields, switches=True)],
        "seqused_k": [
            Variation(
                {"seqused_k": arrays.int32([3, 7]), "cu_seqlens_k": None}, {"cache_seqlens": Address("seqused_k")},
                base=paged,
            )
        ],
        "k_scale": [Variation(int8, int8_fields, base=paged)],
        "v_scale": [Variation(int8, int8_fields, base=paged)],
        "cache_dtype": [Variation(fp8, fp8_fields, base=paged)],
        "key_indices": [Variation({"key_indices": selected_keys(arrays, CU_Q[-1])}, selected_fields(), base=paged)],
    }


def varlen_forward_spec(arrays):
    f = arrays.float32
    keywords = {**score_keywords(arrays), **training_keywords(arrays), **varlen_cache_keywords(arrays)}
    keywords["return_attn_probs"] = [Variation({"return_attn_probs": True}, {})]  # the LSE is always written
    return {
        "call": {
            "q": f(CU_Q[-1], HQ, D), "k": f(CU_K[-1], HKV, D), "v": f(CU_K[-1], HKV, D), **packed_sequences(arrays),
        },
        "required": {**same("q", "k", "v"), **packed_required()},
        "keywords": keywords,
    }


def varlen_backward_spec(arrays):
    f = arrays.float32
    keywords = {**score_keywords(arrays, "forward."), **training_keywords(arrays, "forward.")}
    keywords["sinks"] = [Variation({"sinks": f(HQ)}, {"forward.sinks": Address("sinks"), "dsinks": SET})]
    return {
        "call": {
            "dout": f(CU_Q[-1], HQ, D), "q": f(CU_Q[-1], HQ, D), "k": f(CU_K[-1], HKV, D), "v": f(CU_K[-1], HKV, D),
            "out": f(CU_Q[-1], HQ, D), "softmax_lse": f(HQ, CU_Q[-1]), **packed_sequences(arrays),
        },
        "required": {
            **same("q", "k", "v", prefix="forward."),
            **packed_required("forward."),
            "dout": {"d_o": Address("dout")},
            "out": {"forward.o": Address("out")},
            "softmax_lse": {"forward.lse": Address("softmax_lse")},
        },
        "keywords": keywords,
    }


def kvcache_spec(arrays):
    append = {"k": arrays.float32(B, 2, HKV, D), "v": arrays.float32(B, 2, HKV, D)}
    appended = {
        "k_new": Address("k"), "v_new": Address("v"), "seqlen_new": 2,
        "new_strides.batch": 2 * HKV * D, "new_strides.seq": HKV * D, "new_strides.head": D,
    }
    rotary = {"rotary_cos": arrays.float32(NMAX, 2), "rotary_sin": arrays.float32(NMAX, 2)}
    rotated = {
        "rotary_cos": Address("rotary_cos"), "rotary_sin": Address("rotary_sin"), "rotary_dim": 4,
        "rotary_max_pos": NMAX, "rotary_interleaved": True, "rotary_queries_at_cache_end": True,
    }
    paged = {
        "k_cache": arrays.float32(PAGES, PAGE, HKV, D), "v_cache": arrays.float32(PAGES, PAGE, HKV, D),
        "block_table": arrays.int32([[0, 1], [2, 3]]),
    }
    paged_fields = {
        "block_table": Address("block_table"), "block_table_stride": 2, "max_pages": 2, "num_pages": PAGES,
        "page_size": PAGE, "cache_seqlen_max": 0, "cache_strides.batch": PAGE * HKV * D,
    }
    int8 = {
        "k_cache": arrays.int8(B, NMAX, HKV, D), "v_cache": arrays.int8(B, NMAX, HKV, D),
        "k_scale": arrays.float32(B, NMAX, HKV), "v_scale": arrays.float32(B, NMAX, HKV),
    }
    int8_fields = {
        "cache_element": "int8", "k_scale": Address("k_scale"), "v_scale": Address("v_scale"),
        "scale_strides.batch": NMAX * HKV, "scale_strides.seq": HKV, "scale_strides.head": 1,
    }
    fp8 = {
        "k_cache": arrays.uint8(B, NMAX, HKV, D), "v_cache": arrays.uint8(B, NMAX, HKV, D),
        "k_scale": arrays.float32(HKV), "v_scale": arrays.float32(HKV), "cache_dtype": "fp8_e4m3",
    }
    fp8_fields = {
        "cache_element": "fp8_e4m3", "scale_granularity": "per_head", "k_scale": Address("k_scale"),
        "v_scale": Address("v_scale"),
    }
    values_in_keys = {
        "head_dim_v": 4, "v_cache": Address("k_cache"),
        "o_strides.batch": HQ * 4, "o_strides.seq": HQ * 4, "o_strides.head": 4,
    }
    return {
        "call": {
            "q": arrays.float32(B, 1, HQ, D), "k_cache": arrays.float32(B, NMAX, HKV, D),
            "v_cache": arrays.float32(B, NMAX, HKV, D),
        },
        "required": same("q", "k_cache", "v_cache"),
        "keywords": {
            **score_keywords(arrays),
            "k": [Variation(append, appended)],
            "v": [Variation(append, appended)],
            "rotary_cos": [Variation(rotary, rotated)],
            "rotary_sin": [Variation(rotary, rotated)],
            "rotary_interleaved": [
                Variation({"rotary_interleaved": False}, {"rotary_interleaved": False}, base=rotary)
            ],
            "cache_seqlens": [
                Variation({"cache_seqlens": arrays.int32([3, 7])}, {"cache_seqlens": Address("cache_seqlens")}),
            ],
            "block_table": [Variation(paged, paged_fields)],
            "num_splits": [Variation({"num_splits": 3}, {"num_splits": 3})],
            "return_softmax_lse": [Variation({"return_softmax_lse": True}, {"lse": SET})],
            "k_scale": [Variation(int8, int8_fields)],
            "v_scale": [Variation(int8, int8_fields)],
            "cache_dtype": [Variation(fp8, fp8_fields)],
            "sinks": [Variation({"sinks": arrays.float32(HQ)}, {"sinks": Address("sinks")})],
            "head_dim_v": [Variation({"v_cache": None, "head_dim_v": 4}, values_in_keys)],
            "quantize_query_int8": [
                Variation({"quantize_query_int8": True}, {"quantize_query_int8": True}, base=int8)
            ],
            "quantize_probs_u8": [Variation({"quantize_probs_u8": True}, {"quantize_probs_u8": True}, base=int8)],
            "key_indices": [Variation({"key_indices": selected_keys(arrays, B, 1)}, selected_fields())],
            **decode_sparsity_keywords(arrays),
        },
    }


def decode_sparsity_keywords(arrays):
    """block_mask and document_ids of flash_attn_with_kvcache: a BlockMask of blocks (2, 4), one head, over
    its one query row (1 query block) and lists of width 2; document ids over the NMAX cache rows."""
    ones, zeros = np.ones((B, 1, 1), np.int32), np.zeros((B, 1, 1, 2), np.int32)
    mask = flashattn.BlockMask(ones, zeros, ones, zeros + 1, block_size=(2, 4))
    listed = {
        "block_mask.block_size_q": 2, "block_mask.block_size_k": 4, "block_mask.kv_num_blocks": SET,
        "block_mask.kv_indices": SET, "block_mask.kv_width": 2, "block_mask.full_kv_num_blocks": SET,
        "block_mask.full_kv_indices": SET, "block_mask.full_kv_width": 2,
    }
    ids = arrays.int32(np.arange(B * NMAX).reshape(B, NMAX) // 5)
    return {
        "block_mask": [Variation({"block_mask": mask}, listed)],
        "document_ids": [Variation({"document_ids": ids}, {"document_ids": Address("document_ids")})],
    }


def quantize_kv_spec(arrays):
    groups = {
        "group_size": 4, "scale_strides.batch": NMAX * HKV * 2, "scale_strides.seq": HKV * 2, "scale_strides.head": 2,
    }
    return {
        "call": {"x": arrays.float32(B, NMAX, HKV, D)},
        "required": same("x"),
        "keywords": {
            # fp8 scales are per K/V head unless a granularity is given
            "dtype": [Variation({"dtype": "fp8_e5m2"}, {"element": "fp8_e5m2", "granularity": "per_head"})],
            "group_size": [Variation({"group_size": 4}, groups)],
            "granularity": [Variation({"granularity": "per_tensor"}, {"granularity": "per_tensor"})],
        },
    }


def indexer_spec(arrays):
    seqlens = {"cache_seqlens": arrays.int32([3, 7])}
    paged = {"k_index": arrays.float32(PAGES, PAGE, 1, D), "block_table": arrays.int32([[0, 1], [2, 3]])}
    paged_fields = {
        "k_cache": Address("k_index"), "block_table": Address("block_table"), "block_table_stride": 2, "max_pages": 2,
        "num_pages": PAGES, "page_size": PAGE, "cache_seqlen_max": 0, "cache_strides.batch": PAGE * D,
    }
    scaled = {"k_scale": Address("k_scale"), "k_cache": Address("k_index"), "scale_strides.batch": NMAX,
              "scale_strides.seq": 1}
    int8 = {"k_index": arrays.int8(B, NMAX, 1, D), "k_scale": arrays.float32(B, NMAX)}
    fp8 = {"k_index": arrays.uint8(B, NMAX, 1, D), "k_scale": arrays.float32(B, NMAX), "cache_dtype": "fp8_e4m3"}
    return {
        "call": {
            "q_index": arrays.float32(B, NQ, HQ, D), "k_index": arrays.float32(B, NMAX, 1, D),
            "weights": arrays.float32(B, NQ, HQ), "top_k": 3,
        },
        "required": {
            "q_index": {"q": Address("q_index"), "batch": B, "seqlen_q": NQ, "heads": HQ, "head_dim": D},
            "k_index": {"k_cache": Address("k_index"), "cache_seqlen_max": NMAX, "cache_strides.batch": NMAX * D},
            "weights": {"weights": Address("weights")},
            "top_k": {"top_k": 3},
        },
        "keywords": {
            "cache_seqlens": [Variation(seqlens, {"cache_seqlens": Address("cache_seqlens")})],
            "block_table": [Variation(paged, paged_fields, base=seqlens)],
            "causal": [Variation({"causal": False}, {"causal": False})],
            "k_scale": [Variation(int8, {**scaled, "cache_element": "int8"})],
            "cache_dtype": [Variation(fp8, {**scaled, "cache_element": "fp8_e4m3"})],
            "return_scores": [Variation({"return_scores": True}, {"scores": SET})],
        },
    }


def merge_spec(arrays):
    return {
        "call": {
            "outs": [arrays.float32(B, NQ, HQ, D), arrays.float32(B, NQ, HQ, D)],
            "lses": [arrays.float32(B, HQ, NQ), arrays.float32(B, HQ, NQ)],
        },
        # the partials are stacked into one array each (a copy)
        "required": {
            "outs": {"o_partials": SET, "num_partials": 2, "batch": B, "seqlen": NQ, "heads": HQ, "head_dim_v": D},
            "lses": {"lse_partials": SET},
        },
        "keywords": {},
    }


def sdpa_spec(arrays):
    f = arrays.float32
    gqa = {"key": f(B, HKV, NQ, D), "value": f(B, HKV, NQ, D), "enable_gqa": True}
    grouped = {"heads_kv": HKV, "k_strides.batch": HKV * NQ * D, "v_strides.batch": HKV * NQ * D}
    masked = {
        "mask.kind": "bool", "mask.data": Address("attn_mask"), "mask.stride_batch": HQ * NQ * NQ,
        "mask.stride_head": NQ * NQ, "mask.stride_row": NQ,
    }
    return {
        "call": {"query": f(B, HQ, NQ, D), "key": f(B, HQ, NQ, D), "value": f(B, HQ, NQ, D)},
        "required": {
            "query": {"q": Address("query")}, "key": {"k": Address("key")}, "value": {"v": Address("value")},
        },
        "keywords": {
            "attn_mask": [Variation({"attn_mask": arrays.bool(B, HQ, NQ, NQ)}, masked)],
            "dropout_p": [Variation({"dropout_p": 0.25, "seed": 7}, {"dropout_p": 0.25, "dropout_seed": 7})],
            # top-left causal of L = S query rows and keys: the window (-1, 0)
            "is_causal": [Variation({"is_causal": True}, {"window_right": 0})],
            "scale": [Variation({"scale": 0.5}, {"scale": 0.5})],
            "enable_gqa": [Variation(gqa, grouped)],
            "seed": [Variation({"seed": 12345}, {"dropout_seed": 12345})],
        },
    }


SPECS = {
    "flash_attn_func": forward_spec,
    "flash_attn_backward": backward_spec,
    "flash_attn_varlen_func": varlen_forward_spec,
    "flash_attn_varlen_backward": varlen_backward_spec,
    "flash_attn_with_kvcache": kvcache_spec,
    "quantize_kv": quantize_kv_spec,
    "lightning_indexer": indexer_spec,
    "merge_attention_states": merge_spec,
    "scaled_dot_product_attention": sdpa_spec,
}

# The public functions and classes that pass no parameter struct to the library.
WITHOUT_PARAMETERS = {
    "set_working_memory_limit", "working_memory_limit", "release_working_memory", "retained_working_memory",
    "create_block_mask", "BlockMask",
}


def check_every_function_listed(module):
    functions = set(module.__all__) - {"Error"} - WITHOUT_PARAMETERS
    missing = sorted(functions - set(SPECS))
    assert functions == set(SPECS), f"{module.__name__}: functions without a table {missing}"


class NumpyArrays:
    torch = False

    def __init__(self, rng):
        self.rng = rng

    def float32(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def int8(self, *shape):
        return self.rng.integers(-127, 128, shape).astype(np.int8)

    def uint8(self, *shape):
        return self.rng.integers(0, 120, shape).astype(np.uint8)

    def bool(self, *shape):
        return self.rng.random(shape) < 0.5

    def int32(self, values):
        return np.asarray(values, dtype=np.int32)

    @staticmethod
    def address(array):
        return array.ctypes.data
