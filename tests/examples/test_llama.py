"""examples/01-llama against transformers' `LlamaForCausalLM` (f32, eager attention).

The reference is transformers itself: a `LlamaConfig` with grouped-query
attention (4 query heads over 2 key/value heads), 2 layers and random seeded
weights (`torch.manual_seed`; the RMS norm weights are perturbed away from 1 so
that they matter). Its `state_dict` binds to the Linnet model unchanged, since
the parameter paths are transformers' names. Checked:

- logits of the `forward` entry within 1e-4 and identical argmax, generated
  (`compile=True`) and interpreted;
- `prefill` (also chunked, at a start > 0) and `decode` against the logits of
  the whole sequence, and the KV cache in `state` against transformers' cache;
- greedy decoding of 16 tokens through `prefill`/`decode` equal to
  `generate(do_sample=False)`, batch 2;
- the NumPy reference interpreter on the same model; make_weights.py output
  loaded by both sides; optional biases; a tied checkpoint via
  `tied.bindings.json`; the generics of the `linnet onnx` command line; the demo.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import llama_example
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import linnet.torch as linnet_torch  # noqa: E402
from linnet import pipeline  # noqa: E402
from linnet.cli import main as linnet_main  # noqa: E402
from linnet.ir.core import TensorType  # noqa: E402
from linnet.ir.interp import run_function  # noqa: E402
from linnet.target import Target  # noqa: E402
from linnet.weights import read_safetensors  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "01-llama"
SOURCE = EXAMPLE / "src" / "lib.linnet"


demo = llama_example.script("demo")
make_weights = llama_example.script("make_weights")

Array = np.ndarray[Any, Any]

# A small GQA Llama: head size 8, 4 query heads sharing 2 key/value heads.
SIZES = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2}


def hf_config(sizes: Mapping[str, int], max_seq: int = 64, **extra: Any) -> Any:
    """The transformers config matching `sizes` and the example's fixed constants
    (rope theta 10000, RMS eps 1e-5), without special tokens so generate never stops."""
    settings: dict[str, Any] = {
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "head_dim": sizes["H"] // sizes["Heads"],
        **extra,
    }
    config = transformers.LlamaConfig(
        vocab_size=sizes["Vocab"],
        hidden_size=sizes["H"],
        num_attention_heads=sizes["Heads"],
        num_key_value_heads=sizes["KvHeads"],
        intermediate_size=sizes["Inner"],
        num_hidden_layers=sizes["Layers"],
        max_position_embeddings=max_seq,
        initializer_range=0.15,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
        **settings,
    )
    return config


def hf_model(sizes: Mapping[str, int], seed: int = 0, **extra: Any) -> Any:
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(hf_config(sizes, **extra)).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
    return model


def generics(
    sizes: Mapping[str, int], batch: int, max_seq: int, dtype: str = "f32"
) -> dict[str, object]:
    return {**sizes, "Batch": batch, "MaxSeq": max_seq, "T": dtype}


def state_dict(model: Any) -> dict[str, Any]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def reference_logits(model: Any, tokens: Array) -> Array:
    with torch.no_grad():
        logits: Array = model(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()
    return logits


def assert_logits(actual: Array, expected: Array) -> None:
    assert actual.shape == expected.shape
    gap = float(np.abs(actual - expected).max())
    assert gap <= 1e-4, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


def tokens_of(shape: tuple[int, ...], seed: int, vocab: int = SIZES["Vocab"]) -> Array:
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


@pytest.fixture(scope="module")
def reference() -> Any:
    return hf_model(SIZES)


@pytest.fixture(scope="module", params=[True, False], ids=["compiled", "interpreted"])
def linnet_model(request: pytest.FixtureRequest, reference: Any) -> Iterator[Any]:
    backend = demo.TorchBackend(
        generics(SIZES, batch=2, max_seq=32), state_dict(reference), compile=request.param
    )
    yield backend


# -- the source ------------------------------------------------------------------------


def test_source_checks_strict_and_is_formatted(capsys: pytest.CaptureFixture[str]) -> None:
    assert linnet_main(["check", "--strict", str(SOURCE)]) == 0
    assert linnet_main(["fmt", "--check", str(SOURCE)]) == 0
    assert capsys.readouterr().err == ""


def test_parameter_paths_are_transformers_state_dict_names(reference: Any) -> None:
    model = pipeline.load_model(SOURCE, generics=generics(SIZES, batch=1, max_seq=16))
    declared = {
        path: t.type.shape
        for path, t in model.tensors.items()
        if t.kind == "param" and not t.optional
    }
    expected = {name: tuple(value.shape) for name, value in reference.state_dict().items()}
    assert declared == expected
    states = sorted(p for p, t in model.tensors.items() if t.kind == "state")
    assert states == sorted(
        f"model.layers.{i}.self_attn.{kind}_cache" for i in range(2) for kind in ("k", "v")
    )
    cache = model.tensors["model.layers.0.self_attn.k_cache"].type
    assert cache.shape == (1, SIZES["KvHeads"], 16, SIZES["H"] // SIZES["Heads"])


# -- linnet.torch against transformers ---------------------------------------------------


def test_forward_logits_match_transformers(linnet_model: Any, reference: Any) -> None:
    tokens = tokens_of((3, 11), seed=1)  # B and S bind per call, independent of Batch
    assert_logits(linnet_model.forward(tokens), reference_logits(reference, tokens))


def test_prefill_and_decode_match_the_whole_sequence(linnet_model: Any, reference: Any) -> None:
    tokens = tokens_of((2, 12), seed=2)
    expected = reference_logits(reference, tokens)
    linnet_model.reset()
    assert_logits(linnet_model.prefill(tokens[:, :4], 0), expected[:, :4])
    assert_logits(linnet_model.prefill(tokens[:, 4:9], 4), expected[:, 4:9])  # a chunk at 4
    for position in range(9, 12):
        assert_logits(linnet_model.decode(tokens[:, position], position), expected[:, position])


def test_kv_cache_holds_transformers_keys_and_values(linnet_model: Any, reference: Any) -> None:
    tokens = tokens_of((2, 7), seed=3)
    with torch.no_grad():
        cache = reference(torch.from_numpy(tokens.astype(np.int64)), use_cache=True).past_key_values
    linnet_model.reset()
    linnet_model.prefill(tokens[:, :5], 0)
    linnet_model.decode(tokens[:, 5], 5)
    linnet_model.decode(tokens[:, 6], 6)
    for i, layer in enumerate(cache.layers):
        for kind, stored in (("k", layer.keys), ("v", layer.values)):
            path = f"model.layers.{i}.self_attn.{kind}_cache"
            held = linnet_model.module.tensor(path).numpy()
            assert held.shape == (2, 2, 32, 8)
            np.testing.assert_allclose(held[:, :, :7], stored.numpy(), rtol=1e-5, atol=1e-5)
            assert not held[:, :, 7:].any(), "positions past the written span stay zero"


def test_greedy_decoding_equals_generate(linnet_model: Any, reference: Any) -> None:
    prompt = tokens_of((2, 6), seed=4)
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16
        )
    expected = out[:, 6:].numpy()
    run = demo.greedy(linnet_model, prompt, 16, warm=False)
    assert run.generated.shape == (2, 16)
    np.testing.assert_array_equal(run.generated, expected)
    assert len(set(expected.ravel().tolist())) >= 4, "a degenerate reference proves little"
    history = np.concatenate([prompt, expected], axis=1)
    wanted = reference_logits(reference, history)[:, 5:21]
    assert_logits(run.chosen_from, wanted)


# -- the NumPy reference interpreter -----------------------------------------------------


def test_numpy_interpreter_matches_transformers(reference: Any) -> None:
    backend = demo.InterpreterBackend(generics(SIZES, batch=2, max_seq=16), state_dict(reference))
    tokens = tokens_of((2, 9), seed=5)
    expected = reference_logits(reference, tokens)
    assert_logits(backend.forward(tokens), expected)
    assert_logits(backend.prefill(tokens[:, :6], 0), expected[:, :6])
    for position in range(6, 9):
        assert_logits(backend.decode(tokens[:, position], position), expected[:, position])


def test_onnx_command_generics_lower_a_stateless_forward() -> None:
    """The binds of `linnet onnx --entry forward ... examples/01-llama/src/lib.linnet`."""
    binds = {
        "Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 16, "Layers": 2,
        "Batch": 1, "MaxSeq": 8, "T": "f32", "B": 2, "S": 5,
    }  # fmt: skip
    program = pipeline.check_paths([SOURCE], ROOT / "stdlib")
    target = Target(entry="forward", generics=binds, optionals_present=False)
    compiled = pipeline.compile_entry(program, target)
    fn = compiled.function
    assert [v.type for _, v in fn.inputs] == [TensorType((2, 5), "i32")]
    assert [v.type for v in fn.results] == [TensorType((2, 5, 11), "f32")]
    assert fn.state_updates == {}
    sizes = {k: int(str(binds[k])) for k in ("Vocab", "H", "Heads", "KvHeads", "Inner", "Layers")}
    reference = hf_model(sizes, seed=7)
    weights = {k: v.numpy() for k, v in reference.state_dict().items()}
    tokens = tokens_of((2, 5), seed=6, vocab=11)
    (logits,), _ = run_function(fn, weights, {}, [tokens])
    assert_logits(logits, reference_logits(reference, tokens))


# -- weights: files, optional biases, tied embeddings -------------------------------------


def test_make_weights_file_loads_in_linnet_and_transformers(tmp_path: Path) -> None:
    config = generics(SIZES, batch=1, max_seq=24)
    path = tmp_path / "model.safetensors"
    assert (
        make_weights.main(
            [str(path), "--seed", "3", *(f"--bind={k}={v}" for k, v in config.items())]
        )
        == 0
    )
    arrays = read_safetensors(path)
    again = make_weights.make_weights(config, seed=3)
    assert sorted(arrays) == sorted(again)
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
    reference = transformers.LlamaForCausalLM(hf_config(SIZES)).eval()
    reference.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
    backend = demo.TorchBackend(config, path, compile=False)
    tokens = tokens_of((1, 10), seed=8)
    assert_logits(backend.forward(tokens), reference_logits(reference, tokens))


def test_optional_biases_bind_and_apply() -> None:
    reference = hf_model(SIZES, seed=9, attention_bias=True, mlp_bias=True)
    weights = state_dict(reference)
    assert "model.layers.1.self_attn.k_proj.bias" in weights
    assert "model.layers.0.mlp.down_proj.bias" in weights
    with torch.no_grad():
        for name, value in weights.items():
            if name.endswith(".bias"):
                value.normal_(0.0, 0.5)
        reference.load_state_dict(weights)
    backend = demo.TorchBackend(generics(SIZES, batch=1, max_seq=16), weights, compile=False)
    tokens = tokens_of((1, 8), seed=10)
    expected = reference_logits(reference, tokens)
    assert_logits(backend.forward(tokens), expected)
    assert_logits(backend.prefill(tokens, 0), expected)


def test_tied_checkpoint_binds_through_tied_bindings(tmp_path: Path) -> None:
    reference = hf_model(SIZES, seed=11, tie_word_embeddings=True)
    reference.save_pretrained(tmp_path)
    stored = read_safetensors(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in stored  # save_pretrained omits the tied head
    bindings = EXAMPLE / "tied.bindings.json"
    assert json.loads(bindings.read_text()) == {"lm_head.weight": "model.embed_tokens.weight"}
    module = linnet_torch.load(
        SOURCE,
        generics=generics(SIZES, batch=1, max_seq=16),
        weights=tmp_path / "model.safetensors",
        bindings=bindings,
    )
    tokens = tokens_of((2, 7), seed=12)
    with torch.no_grad():
        logits = module(torch.from_numpy(tokens)).numpy()
    assert_logits(logits, reference_logits(reference, tokens))


def test_bf16_model_runs_close_to_transformers_bf16() -> None:
    reference = hf_model(SIZES, seed=13).to(torch.bfloat16)
    weights = state_dict(reference)
    backend = demo.TorchBackend(generics(SIZES, 1, 16, "bf16"), weights, compile=True)
    tokens = tokens_of((1, 6), seed=14)
    logits = backend.forward(tokens)
    expected = reference_logits(reference, tokens)
    assert backend.module.tensor("lm_head.weight").dtype == torch.bfloat16
    gap = np.abs(logits.astype(np.float32) - expected.astype(np.float32)).max()
    assert gap <= 0.0625, f"bf16 max |logit difference| {gap}"  # 4 bf16 ulps at |logit| ~2


# -- the demo ----------------------------------------------------------------------------


def test_demo_generates_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--out", str(tmp_path), "--new-tokens", "6", "--transformers"]
    assert demo.main([*args, "--bind", "Vocab=64", "--bind", "MaxSeq=16"]) == 0
    out = capsys.readouterr().out
    assert "check      0 errors, 0 warnings" in out
    assert "identical tokens" in out
    generated = [line for line in out.splitlines() if line.startswith("  generated")]
    assert len(generated) == 1 and len(json.loads(generated[0].split(None, 1)[1])) == 6
    assert (tmp_path / "model.safetensors").is_file()
    assert "backend    linnet.torch, compile=True" in out
    assert "note" not in out
    # text in, text out: a card with the shipped tokenizer, streamed, then one HTTP request
    assert "nest.check finds 0 problems" in out
    assert "(30522 in the vocabulary)" in out
    assert "reply      24 tokens, the streamed text" in out
    assert out.rstrip().endswith("server     shut down")
    assert (tmp_path / "card" / "nest.toml").is_file()


ONNX_COMMAND = (
    "onnx --std stdlib --entry forward --bind Vocab=11 --bind H=8 --bind Heads=2 "
    "--bind KvHeads=1 --bind Inner=16 --bind Layers=2 --bind Batch=1 --bind MaxSeq=8 "
    "--bind T=f32 --bind B=2 --bind S=5 examples/01-llama/src/lib.linnet"
)


def test_linnet_onnx_command_runs_in_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact `linnet onnx` command line of the issue, written to a file and run."""
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    monkeypatch.chdir(ROOT)
    assert linnet_main([*ONNX_COMMAND.split(), "--output", str(tmp_path / "llama.onnx")]) == 0
    model = onnx.load(tmp_path / "llama.onnx")
    paths = {
        p.key.removeprefix("linnet.path."): p.value
        for p in model.metadata_props
        if p.key.startswith("linnet.path.")
    }
    sizes = {"Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 16, "Layers": 2}
    reference = hf_model(sizes, seed=16)
    weights = {k: v.numpy() for k, v in reference.state_dict().items()}
    tokens = tokens_of((2, 5), seed=17, vocab=11)
    feeds: dict[str, Array] = {"tokens": tokens}
    for graph_input in model.graph.input:
        if graph_input.name in paths:
            path = paths[graph_input.name]
            shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
            # the command line treats optional biases as present; this checkpoint has none
            feeds[graph_input.name] = weights.get(path, np.zeros(shape, np.float32))
    assert set(weights) <= set(paths.values())
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, feeds)
    assert_logits(logits, reference_logits(reference, tokens))


# -- the config's values as generics ------------------------------------------------------

CONFIG_GENERICS = {
    "HeadDim": 16,  # explicit head_dim, not H / Heads
    "RopeTheta": 500000,
    "EpsInverse": 1000000,
    "RopeFactor": 8,
    "RopeLowFreqFactor": 1,
    "RopeHighFreqFactor": 4,
    "RopeOriginalMaxSeq": 32,
}


def test_config_values_bind_as_generics() -> None:
    """rope theta, rms eps, head_dim and llama3 rope scaling set by the caller, not the source."""
    torch.manual_seed(17)
    config = hf_config(
        SIZES,
        rms_norm_eps=1e-6,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
        head_dim=CONFIG_GENERICS["HeadDim"],
    )
    reference = transformers.LlamaForCausalLM(config).eval()
    assert reference.model.layers[0].self_attn.q_proj.weight.shape == (64, 32)
    binds = {**generics(SIZES, batch=1, max_seq=40), **CONFIG_GENERICS}
    backend = demo.TorchBackend(binds, state_dict(reference), compile=True)
    tokens = tokens_of((1, 37), seed=18)
    expected = reference_logits(reference, tokens)
    assert_logits(backend.forward(tokens), expected)
    backend.reset()
    assert_logits(backend.prefill(tokens[:, :30], 0), expected[:, :30])
    for position in range(30, 37):
        assert_logits(backend.decode(tokens[:, position], position), expected[:, position])
    # the scaling matters: unscaled frequencies give other logits
    plain = demo.TorchBackend({**binds, "RopeFactor": 1}, state_dict(reference), compile=True)
    assert float(np.abs(plain.forward(tokens) - expected).max()) > 1e-3
