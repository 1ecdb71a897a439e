"""Quantised Qwen2, Qwen3, Phi-3 and GPT-2 examples (`linnet.quant.quantize_source`) end to end.

Each family's float source is rewritten by the one library rewrite, its
transformers `state_dict` (tests/decoder_cases.py: a small random model whose
norms and biases matter) quantised by `quantize_checkpoint` with the globs the
rewrite names (GPT-2's `Conv1D` weights, stored `[In, Out]`, transposed first).
The reference is the transformers model itself with every quantised weight
replaced by its dequantised value (`linnet.gguf.quantised.dequantized`, the NumPy
decoder checked against GPTQ's and the std bodies elsewhere). The quantised
source through `linnet.torch` and `linnet.onnx.load_model` must give its
`forward` logits within f32 rounding, while quantisation itself moves them much
further, and the same greedy tokens through `prefill` and `decode` as the
reference's `generate`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import decoder_cases  # noqa: E402
import family_support  # noqa: E402

import linnet.onnx  # noqa: E402
import linnet.torch  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.gguf.quantised import dequantized  # noqa: E402
from linnet.pipeline import check_source  # noqa: E402
from linnet.quant import quantize_checkpoint, quantize_source  # noqa: E402
from linnet.weights import read_safetensors, save_safetensors  # noqa: E402

Array = np.ndarray[Any, Any]
Call = Callable[[str, list[Array]], Array]
GROUP = 16  # divides every linear's inputs at the small sizes (32, 48, 64, 128)
MAX_SEQ = 16
KINDS = {"int4": "int4_groups", "int8": "int8", "fp8": "fp8", "mxfp4": "mxfp4"}

CASES = [
    ("qwen2", "int4"),
    ("qwen2", "int8"),
    ("qwen3", "int4"),
    ("qwen3", "int8"),
    ("phi3", "int4"),
    ("phi3", "int8"),
    ("gpt2", "int4"),
    ("gpt2", "int8"),
    ("gpt2", "fp8"),
    ("gpt2", "mxfp4"),  # GPT-2's inputs (32, 128) are whole MX blocks; the others' 48 is not
]


def _options(kind: str) -> dict[str, Any]:
    if kind in ("fp8", "mxfp4"):
        return {"scheme": kind}
    return {"bits": int(kind[3:]), "group": GROUP}


def _reference(decoder: decoder_cases.Decoder, stored: dict[str, Array], quantised: list[str],
               transposed: set[str], kind: str) -> Any:  # fmt: skip
    """The transformers model holding the dequantised weights of `stored`."""
    model = copy.deepcopy(decoder.reference)
    state = model.state_dict()
    for name in quantised:
        prefix = name.removesuffix(".weight")
        zero = stored.get(f"{prefix}.zero") if kind == "int4" else None
        weight = dequantized(KINDS[kind], stored[name], stored[f"{prefix}.scale"], zero, None)
        weight = weight.T if name in transposed else weight
        assert state[name].shape == weight.shape, name
        state[name] = torch.from_numpy(np.ascontiguousarray(weight, np.float32))
    model.load_state_dict(state)
    return model


def _greedy(call: Call, prompt: Array, steps: int) -> list[int]:
    """`steps` greedy tokens: `prefill` of the prompt, then one `decode` per token."""
    token = call("prefill", [prompt[None], np.int32(0)])[0, -1].argmax()
    chosen = [int(token)]
    for step in range(1, steps):
        position = np.int32(len(prompt) + step - 1)
        token = call("decode", [np.array([chosen[-1]], np.int32), position])[0].argmax()
        chosen.append(int(token))
    return chosen


@pytest.mark.parametrize(("family", "kind"), CASES)
def test_quantised_family_matches_its_dequantised_transformers_model(
    tmp_path: Path, family: str, kind: str
) -> None:
    decoder = getattr(decoder_cases, family)()
    rewrite = quantize_source(decoder.source.read_text(), **_options(kind))
    assert rewrite.transposed == (rewrite.patterns if family == "gpt2" else ())
    save_safetensors(decoder.weights, tmp_path / "float.safetensors")
    quantised = quantize_checkpoint(tmp_path / "float.safetensors", tmp_path / "q.safetensors",
                                    patterns=rewrite.patterns, transposed=rewrite.transposed,
                                    **_options(kind))  # fmt: skip
    layers = 2
    per_layer = {"qwen2": 7, "qwen3": 7, "phi3": 4, "gpt2": 4}[family]
    head = 0 if family == "gpt2" else 1  # GPT-2's head is the (float) token embedding
    assert len(quantised) == per_layer * layers + head
    source = tmp_path / "q.linnet"
    source.write_text(rewrite.text)
    stored = read_safetensors(tmp_path / "q.safetensors")
    transposed = set(quantised) if family == "gpt2" else set()
    reference = _reference(decoder, stored, quantised, transposed, kind)
    exact = decoder
    quantised_decoder = copy.copy(decoder)
    quantised_decoder.reference = reference

    generics = decoder.generics(1, MAX_SEQ)
    module = linnet.torch.load(source, generics=generics, weights=tmp_path / "q.safetensors")
    onnx_model = linnet.onnx.load_model(source, generics=generics,
                                        weights=tmp_path / "q.safetensors")  # fmt: skip

    def torch_call(entry: str, inputs: list[Array]) -> Array:
        args = [torch.from_numpy(np.asarray(x)) if np.ndim(x) else int(x) for x in inputs]
        with torch.no_grad():
            out: Array = module.run_entry(entry, args).numpy()
        return out

    def onnx_call(entry: str, inputs: list[Array]) -> Array:
        return np.asarray(onnx_model.run_entry(entry, inputs))

    tokens = decoder_cases.prompts(decoder.vocab, [9], seed=5)[0]
    expected = quantised_decoder.logits(tokens)
    quantisation_error = float(np.abs(exact.logits(tokens) - expected).max())
    assert quantisation_error > 1e-3  # the weights really were quantised
    prompt = tokens[:5]
    want = quantised_decoder.generate(prompt, 6)
    for call in (torch_call, onnx_call):
        got = call("forward", [tokens[None]])[0]
        gap = float(np.abs(got - expected).max())
        assert gap <= 1e-4 * max(1.0, float(np.abs(expected).max())), (call.__name__, gap)
        assert gap < quantisation_error / 20
        assert _greedy(call, prompt, 6) == want, call.__name__
    kernels = {n.op_type for s in onnx_model.sessions for n in s.proto.graph.node}
    assert ("MatMulNBits" in kernels) == (kind == "int4")


def test_the_rewrite_states_what_the_std_blocks_need() -> None:
    """Phi-3's fused projections stay whole; the divisibility facts climb to the root with
    the holders' arguments; entries reading `lm_head.weight` go unless `lm_head` is kept."""
    text = family_support.source("phi3").read_text()
    rewrite = quantize_source(text, bits=4, group=64)
    assert "sub qkv_proj: Int4GroupLinear<H, (Heads + 2 * KvHeads) * HeadDim, 64, T>" in (
        rewrite.text
    )
    root = rewrite.text[rewrite.text.index("pub block Phi3ForCausalLM<") :]
    for fact in ("H % 64 == 0", "Inner % 64 == 0", "(Heads * HeadDim) % 64 == 0"):
        assert f"    {fact},\n" in root[: root.index("\n{\n")]
    assert "entry loss_packed" not in rewrite.text and "use std.nn.loss" not in rewrite.text
    assert "lm_head.weight" in rewrite.patterns and "*.qkv_proj.weight" in rewrite.patterns
    kept = quantize_source(text, scheme="fp8", keep=("lm_head",))
    assert "sub lm_head: Linear<H, Vocab, T>" in kept.text and "entry loss_packed" in kept.text
    assert "lm_head.weight" not in kept.patterns and "where\n    H %" not in kept.text
    with pytest.raises(LinnetError, match="no linear to quantise"):
        quantize_source(text, bits=8, keep=("qkv_proj", "o_proj", "gate_up_proj", "down_proj",
                                            "lm_head"))  # fmt: skip
    with pytest.raises(LinnetError, match="no linear member is named `lm_haed`"):
        quantize_source(text, bits=8, keep=("lm_haed",))
    with pytest.raises(LinnetError, match="group must be a positive even size"):
        quantize_source(text, bits=4, group=3)


SYNTHETIC = """module synth

use std.nn.linear::{Linear, linear}
use std.nn.loss::{linear_token_log_probs}

/// A linear under another name, its bias optional.
pub block Proj<A: Dim, B: Dim, T: Float> {
    param weight: Tensor[B, A; T]
    param bias: Tensor[B; T]? = none

    pub fn forward<*S: Shape>(x: Tensor[*S, A; T]) -> Tensor[*S, B; T] {
        return linear(x, weight, bias)
    }
}

pub block Pair<N: Dim, T: Float = f32>
where N > 0 {
    sub wide: Linear<N, N * 2, T>
    sub narrow: Proj<N * 2, N, T>
    sub spare: [Proj<N, N, T>; 2]

    pub fn forward<*S: Shape>(x: Tensor[*S, N; T]) -> Tensor[*S, N; T] {
        return narrow.forward(wide.forward(x))
    }
}

pub block Top<D: Dim, V: Dim, T: Float> {
    sub pair: Pair<D + 2>
    sub head: Linear<D + 2, V, f32>

    pub entry forward<S: Dim>(x: Tensor[S, D + 2; f32]) -> Tensor[S, V; f32] {
        return head.forward(pair.forward(x))
    }

    /// `log p(targets)`: reads the head as a float matrix.
    pub entry log_probs<S: Dim>(
        x: Tensor[S, D + 2; f32],
        targets: Tensor[S; i64],
    ) -> Tensor[S; f32] {
        return linear_token_log_probs(pair.forward(x), head.weight, targets)
    }
}
"""


@pytest.mark.parametrize("options", [{"bits": 4, "group": 16}, {"bits": 8}, {"scheme": "mxfp4"}])
def test_the_rewrite_of_a_small_module_checks(options: dict[str, Any]) -> None:
    """A linear-shaped block of the file is a linear (alone or in an array); facts go
    through generic arguments (a compound one, a defaulted `T`) and a clause on one line;
    the entry reading `head.weight` goes with its doc comment, and the imports only it used."""
    rewrite = quantize_source(SYNTHETIC, **options)
    program = check_source(rewrite.text)
    assert not program.has_errors, [d.message for d in program.diagnostics]
    assert rewrite.patterns == ("*.wide.weight", "*.narrow.weight", "*.spare.*.weight",
                                "head.weight")  # fmt: skip
    assert "sub spare: [" + rewrite.block in rewrite.text
    assert "log_probs" not in rewrite.text and "use std.nn.loss" not in rewrite.text
    assert "reads the head" not in rewrite.text and "\n\n\n" not in rewrite.text
    assert "use std.nn.linear::{linear}\n" in rewrite.text
    group = {4: 16, 8: 0}[options["bits"]] if "bits" in options else 32
    facts = [f"(D + 2) % {group} == 0", f"((D + 2) * 2) % {group} == 0"]
    assert all((f"    {fact}" in rewrite.text) == bool(group) for fact in facts)


def test_the_rewrite_refuses_what_it_cannot_quantise() -> None:
    reader = SYNTHETIC.replace("pub entry log_probs", "pub fn log_probs")
    with pytest.raises(LinnetError, match=r"`Top.log_probs` reads `head.weight` as a float"):
        quantize_source(reader, bits=8)
    literal = SYNTHETIC.replace("sub head: Linear<D + 2, V, f32>", "sub head: Linear<48, V, f32>")
    literal = literal.replace("D + 2; f32]", "48; f32]").replace("sub pair: Pair<D + 2>",
                                                                  "sub pair: Pair<48>")  # fmt: skip
    sized = quantize_source(literal, bits=4, group=16).text  # 48 and 48 * 2: no facts to state
    assert "pub block Top<D: Dim, V: Dim, T: Float> {" in sized
    assert not check_source(sized).has_errors
    with pytest.raises(LinnetError, match="has 48 inputs, which the group size 32 does not"):
        quantize_source(literal, scheme="mxfp4")
