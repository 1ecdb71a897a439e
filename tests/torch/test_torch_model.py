"""A small Llama end to end on `linnet.torch.load` against two independent references.

The model is tests/torch/data/llama.linnet (std RMS norm, rope, grouped
attention, SwiGLU, a KV cache in `state`). References: the NumPy interpreter
running the very lowered function (results and new state), and a hand-written
eager module (tests/torch/data/llama_eager.py) holding the same weights.
Both execution paths are covered: interpreted (`compile=False`) and generated.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import linnet.torch as lt
from linnet.errors import LinnetError
from linnet.ir.interp import run_function
from linnet.torch.dtypes import to_numpy

DATA = Path(__file__).parent / "data"
LLAMA = DATA / "llama.linnet"
GENERICS = {"B": 1, "Vocab": 40, "H": 16, "Layers": 2, "Heads": 4, "KvHeads": 2,
            "Inner": 24, "MaxSeq": 8}  # fmt: skip


def eager_module() -> Any:
    spec = importlib.util.spec_from_file_location("llama_eager", DATA / "llama_eager.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def llama_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights for every mandatory param (the optional biases stay absent)."""
    from linnet.ir.bind import bind
    from linnet.pipeline import check_program

    model = bind(check_program(LLAMA), generics=GENERICS)
    rng = np.random.default_rng(seed)
    out = {}
    for path, t in model.tensors.items():
        if t.kind == "param" and not t.optional:
            scale = 1.0 if path.endswith("layernorm.weight") or path == "norm.weight" else 0.3
            base = 1.0 if scale == 1.0 else 0.0
            out[path] = (base + scale * rng.standard_normal(t.type.shape)).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return llama_weights()


def interpreted(m: lt.LinnetModule, entry: str, inputs: list[np.ndarray],
                weights: dict[str, np.ndarray], state: dict[str, np.ndarray]
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:  # fmt: skip
    """The NumPy oracle on the function the module lowered for its latest call."""
    results, new_state = run_function(m.lowered(entry), weights, state, inputs)
    return results[0], new_state


def module_state(m: lt.LinnetModule) -> dict[str, np.ndarray]:
    return {
        path: to_numpy(m.tensor(path), "f32")
        for path, t in m.linnet_model.tensors.items()
        if t.kind == "state"
    }


@pytest.mark.parametrize("compile", [False, True])
def test_llama_matches_interpreter_and_eager(weights: dict[str, np.ndarray], compile: bool) -> None:
    m = lt.load(LLAMA, generics=GENERICS, weights=weights, compile=compile)
    eager = eager_module().EagerLlama(**GENERICS)
    eager.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    ids = np.array([[3, 17, 5, 9, 30]], np.int32)
    state = module_state(m)  # zeros
    with torch.no_grad():
        logits = m(torch.from_numpy(ids))
        expected, state = interpreted(m, "forward", [ids], weights, state)
        reference = eager(torch.from_numpy(ids).long())
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    for path, value in module_state(m).items():
        np.testing.assert_allclose(value, state[path], rtol=1e-5, atol=1e-5)
    for pos, token in [(5, 11), (6, 2)]:
        step = np.array([[token]], np.int32)
        with torch.no_grad():
            got = m.run_entry("decode", [torch.from_numpy(step), pos])
            want, state = interpreted(m, "decode", [step, np.array(pos, np.int32)], weights, state)
            ref = eager.decode(torch.from_numpy(step).long(), torch.tensor([pos]))
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    for path, value in module_state(m).items():
        np.testing.assert_allclose(value, state[path], rtol=1e-5, atol=1e-5)


def test_state_is_kept_between_calls_and_reset(weights: dict[str, np.ndarray]) -> None:
    m = lt.load(LLAMA, generics=GENERICS, weights=weights)
    step = torch.tensor([[4]], dtype=torch.int32)
    with torch.no_grad():
        cold = m.run_entry("decode", [step, 2])
        m(torch.tensor([[1, 2]], dtype=torch.int32))
        warm = m.run_entry("decode", [step, 2])
        assert not torch.allclose(cold, warm)
        cache = m.tensor("layers.1.self_attn.k_cache")
        assert cache[:, :, :3].abs().sum() > 0 and cache[:, :, 3:].abs().sum() == 0
        m.reset_state()
        assert m.tensor("layers.1.self_attn.k_cache").abs().sum() == 0
        again = m.run_entry("decode", [step, 2])
    torch.testing.assert_close(again, cold, rtol=0, atol=0)


def test_compiled_equals_interpreted(weights: dict[str, np.ndarray]) -> None:
    ids = torch.tensor([[7, 1, 3]], dtype=torch.int32)
    outs = []
    for compile in (False, True):
        m = lt.load(LLAMA, generics=GENERICS, weights=weights, compile=compile)
        with torch.no_grad():
            outs.append((m(ids), m.run_entry("decode", {"ids": ids[:, :1], "pos": 3})))
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_state_dict_keys_are_the_paths(weights: dict[str, np.ndarray]) -> None:
    m = lt.load(LLAMA, generics=GENERICS, weights=weights)
    assert set(m.state_dict()) == set(weights)
    assert len(list(m.parameters())) == 0  # not trainable: params are buffers
    states = {p for p, t in m.linnet_model.tensors.items() if t.kind == "state"}
    assert {n for n, _ in m.named_buffers()} == set(weights) | states
    eager = eager_module().EagerLlama(**GENERICS)
    eager.load_state_dict(m.state_dict(), strict=True)  # the same keys as HF-style modules


def test_load_state_dict_refreshes_cached_values(weights: dict[str, np.ndarray]) -> None:
    """Hoisted weight-derived values are recomputed when a weight changes in place."""
    source = """module scaled
pub block Scaled<N: Dim> {
    param w: Tensor[N; f32]
    pub entry forward(x: Tensor[N; f32]) -> Tensor[N; f32] {
        return x * exp(w)
    }
}"""
    for compile in (False, True):
        m = lt.load(source, generics={"N": 3}, weights={"w": np.zeros(3, np.float32)},
                    compile=compile)  # fmt: skip
        x = torch.ones(3)
        torch.testing.assert_close(m(x), torch.ones(3))
        m.load_state_dict({"w": torch.full((3,), float(np.log(2.0)))})
        torch.testing.assert_close(m(x), torch.full((3,), 2.0))


@pytest.mark.parametrize("compile", [False, True])
def test_inference_mode(weights: dict[str, np.ndarray], compile: bool) -> None:
    """A module built and run under `torch.inference_mode()` (tensors without versions)."""
    source = """module scaled
pub block Scaled<N: Dim> {
    param w: Tensor[N; f32]
    pub entry forward(x: Tensor[N; f32]) -> Tensor[N; f32] {
        return x * exp(w)
    }
}"""
    with torch.inference_mode():
        m = lt.load(source, generics={"N": 2}, weights={"w": np.zeros(2, np.float32)},
                    compile=compile)  # fmt: skip
        for _ in range(2):
            torch.testing.assert_close(m(torch.ones(2)), torch.ones(2))
        ids = torch.tensor([[1, 2]], dtype=torch.int32)
        llama = lt.load(LLAMA, generics=GENERICS, weights=weights, compile=compile)
        assert llama(ids).shape == (1, 2, 40)


@pytest.mark.parametrize("compile", [False, True])
def test_inputs_are_checked(weights: dict[str, np.ndarray], compile: bool) -> None:
    m = lt.load(LLAMA, generics=GENERICS, weights=weights, compile=compile)
    with pytest.raises(LinnetError, match="ids"):
        m(torch.zeros(1, 3))  # f32 where i32 is declared
    with pytest.raises(LinnetError, match="ids"):
        m(torch.zeros(3, dtype=torch.int32))  # rank 1
    with pytest.raises(LinnetError, match="ids"):
        m(torch.zeros(2, 3, dtype=torch.int32))  # B is 1 for this model
    with pytest.raises(LinnetError, match="ids"):
        m.run_entry("decode", [torch.zeros(1, 2, dtype=torch.int32), 0])  # [B, 1] declared
    with pytest.raises(LinnetError, match="pos"):
        m.run_entry("decode", [torch.zeros(1, 1, dtype=torch.int32), torch.tensor(1.5)])
    with pytest.raises(LinnetError, match="pos"):
        m.run_entry("decode", [torch.zeros(1, 1, dtype=torch.int32), 1.5])  # a float for i32
    with pytest.raises(LinnetError, match="pos"):
        m.run_entry("decode", [torch.zeros(1, 1, dtype=torch.int32), 2**40])  # out of i32
    with pytest.raises(LinnetError, match="nope"):
        m.run_entry("nope", [])
    with pytest.raises(LinnetError, match="uint16"):
        m(torch.zeros(1, 3, dtype=torch.uint16))


def test_weights_are_checked() -> None:
    with pytest.raises(LinnetError, match=r"embed_tokens\.weight"):
        lt.load(LLAMA, generics=GENERICS)
    bad = llama_weights()
    bad["norm.weight"] = bad["norm.weight"][:3]
    with pytest.raises(LinnetError, match=r"norm\.weight"):
        lt.load(LLAMA, generics=GENERICS, weights=bad)


def mapped_resident_kb(path: Path) -> int | None:
    """The resident kB of this process's mappings of `path` (/proc/self/smaps), or None
    when it has none."""
    found = None
    current = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and ":" not in fields[0]:  # a mapping's head
            current = len(fields) >= 6 and fields[5] == str(path)
        elif current and fields[0] == "Rss:":
            found = (found or 0) + int(fields[1])
    return found


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_checkpoint_pages_are_dropped_once_copied(
    weights: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """The module copies the weights; the checkpoint's mapped pages are released, so the
    process never holds them twice (a served TinyLlama peaked at twice its weights)."""
    from linnet.weights.safetensors import SafeTensorsFile, save_safetensors

    path = tmp_path / "w.safetensors"
    save_safetensors(weights, path)
    file = SafeTensorsFile(path)
    arrays = {name: file.load(name) for name in weights}  # views of the mapping, kept alive
    m = lt.load(LLAMA, generics=GENERICS, weights=arrays)
    assert mapped_resident_kb(path.resolve()) == 0
    for name, array in arrays.items():  # still readable: the pages come back from the file
        np.testing.assert_array_equal(array, weights[name])
        np.testing.assert_array_equal(to_numpy(m.tensor(name), "f32"), weights[name])
