"""linnet.jax.natives and shared layer functions against the canonical bodies.

The cache writes and attention ops of std run as one `lax` helper each in the
source `linnet.jax.load` traces (`N.write_span`, `N.write_rows`, `N.attention`); the NumPy
reference interpreter runs their canonical bodies. They agree for every write
position, inside the cache, partly outside and far outside (the int32
extremes), bit for bit, and attention within the f32 contract. A Llama with
three layers compiled through `load_model` traces one jitted layer function
(`linnet.jax.layers`), with the rotary frequencies folded to constants (no
64-bit trace), and computes what the unshared `load_source` computes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from backend_cases import assert_close  # noqa: E402

import linnet.jax as lj  # noqa: E402
from linnet.ir.interp import run_function  # noqa: E402
from linnet.pipeline import check_source, lower_module_entry, optimize  # noqa: E402

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "01-llama" / "src" / "lib.linnet"

SOURCE = """module natives_case

use std.nn.attention::{grouped_attention, grouped_attention_rows}
use std.nn.cache::{write_at, write_rows, write_span}

pub entry span(
    cache: Tensor[2, 3, 8, 4; f32],
    value: Tensor[2, 3, 3, 4; f32],
    at: i32,
) -> Tensor[2, 3, 8, 4; f32] {
    return write_span(cache, value, at)
}

pub entry one(
    cache: Tensor[2, 3, 8, 4; f32],
    value: Tensor[2, 3, 1, 4; f32],
    at: i32,
) -> Tensor[2, 3, 8, 4; f32] {
    return write_at(cache, value, at)
}

pub entry rows(
    cache: Tensor[2, 3, 8, 4; f32],
    value: Tensor[2, 3, 1, 4; f32],
    at: Tensor[2; i32],
) -> Tensor[2, 3, 8, 4; f32] {
    return write_rows(cache, value, at)
}

pub entry grouped(
    q: Tensor[2, 4, 3, 8; f32],
    k: Tensor[2, 2, 5, 8; f32],
    v: Tensor[2, 2, 5, 8; f32],
    mask: Tensor[3, 5; bool],
) -> Tensor[2, 4, 3, 8; f32] {
    return grouped_attention(q, k, v, 0.35, some(mask))
}

pub entry grouped_rows(
    q: Tensor[2, 4, 1, 8; f32],
    k: Tensor[2, 2, 5, 8; f32],
    v: Tensor[2, 2, 5, 8; f32],
    mask: Tensor[2, 1, 5; bool],
) -> Tensor[2, 4, 1, 8; f32] {
    return grouped_attention_rows(q, k, v, 0.35, mask)
}
"""

EXTREMES = [-(2**31), -(2**31) + 1, 2**31 - 2, 2**31 - 1]


def _reference(entry: str, inputs: list[np.ndarray]) -> np.ndarray:
    program = check_source(SOURCE)
    fn = optimize(lower_module_entry(program, "natives_case", entry, _types(inputs)))
    return np.asarray(run_function(fn, {}, {}, inputs)[0][0])


def _types(inputs: list[np.ndarray]) -> list[object]:
    from linnet.ir.core import TensorType, dtype_of_numpy

    return [TensorType(a.shape, dtype_of_numpy(a.dtype)) for a in inputs]


@pytest.mark.parametrize(("entry", "count"), [("span", 3), ("one", 1)])
def test_write_span_matches_the_canonical_body(entry: str, count: int) -> None:
    f = lj.load(SOURCE, entry=entry)
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((2, 3, 8, 4)).astype(np.float32)
    value = rng.standard_normal((2, 3, count, 4)).astype(np.float32)
    for at in [*range(-count - 2, 11), *EXTREMES]:
        inputs = [cache, value, np.asarray(at, np.int32)]
        got = np.asarray(f(*inputs))
        assert np.array_equal(got, _reference(entry, inputs)), at
    assert "N.write_span(" in f.generated_source()


def test_write_rows_matches_the_canonical_body() -> None:
    f = lj.load(SOURCE, entry="rows")
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((2, 3, 8, 4)).astype(np.float32)
    value = rng.standard_normal((2, 3, 1, 4)).astype(np.float32)
    for at in ([0, 7], [3, 3], [-1, 8], [5, -(2**31)], [2**31 - 1, 2]):
        inputs = [cache, value, np.asarray(at, np.int32)]
        assert np.array_equal(np.asarray(f(*inputs)), _reference("rows", inputs)), at
    assert "N.write_rows(" in f.generated_source()


@pytest.mark.parametrize("entry", ["grouped", "grouped_rows"])
def test_grouped_attention_matches_the_canonical_body(entry: str) -> None:
    f = lj.load(SOURCE, entry=entry)
    rng = np.random.default_rng(2)
    queries = 3 if entry == "grouped" else 1
    q = rng.standard_normal((2, 4, queries, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    shape = (3, 5) if entry == "grouped" else (2, 1, 5)
    mask = rng.random(shape) < 0.6
    mask[..., 0, :] = False  # a fully masked row averages the values, as the body does
    inputs = [q, k, v, mask]
    assert_close(np.asarray(f(*inputs)), _reference(entry, inputs), "f32", 1.0)
    assert "N.attention(" in f.generated_source()


def test_llama_layers_share_one_traced_function() -> None:
    sizes = {"Vocab": 40, "H": 16, "Heads": 4, "KvHeads": 2, "Inner": 24, "Layers": 3}
    bound = {**sizes, "Batch": 1, "MaxSeq": 12, "T": "f32"}
    rng = np.random.default_rng(3)
    weights = _llama_weights(sizes, rng)
    model = lj.load_model(LLAMA, generics=bound, weights=weights)
    source = lj.load_source(LLAMA, generics=bound, weights=weights, entry="prefill")
    tokens = rng.integers(0, 40, (1, 5)).astype(np.int32)
    ours = np.asarray(model.run_entry("prefill", [tokens, 0]))
    unshared, _ = source(tokens, 0)
    assert_close(ours, np.asarray(unshared), "f32", 1.0)
    text = model.entry("prefill").generated_source()
    assert text.count("def layer_0(") == 1 and text.count("= layer_0(") == 3
    run = model.entry("prefill")._for(None).run
    assert not run.generated.x64 and "f64" not in run.text


def _llama_weights(sizes: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights by transformers' names."""
    h, inner, vocab = sizes["H"], sizes["Inner"], sizes["Vocab"]
    kv = h // sizes["Heads"] * sizes["KvHeads"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,)}
    shapes["lm_head.weight"] = (vocab, h)
    for i in range(sizes["Layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (inner, h),
            p + "mlp.up_proj.weight": (inner, h),
            p + "mlp.down_proj.weight": (h, inner),
        }
    return {n: (0.3 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}
