"""Entry inputs checked at the boundary: one `LinnetError`, the same message, on every backend.

The model is examples/01-llama, tiny (`MaxSeq` = 8, `Vocab` = 11), run on
linnet.torch interpreted and generated (`compile=True`) and on ONNX Runtime
(`linnet.onnx.load_model`). Each refused call is checked on all three: the
message is pinned once and must come back word for word from each backend,
and the state is untouched (nothing ran). Accepted calls that the boundary
converts (int64 token ids, a NumPy integer scalar) must give the logits of
the plain i32 call.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import linnet.torch as linnet_torch  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.onnx import load_model  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "01-llama"
SOURCE = EXAMPLE / "src" / "lib.linnet"
CONFIG = {"Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 8, "Layers": 1,
          "Batch": 1, "MaxSeq": 8, "T": "f32"}  # fmt: skip
BACKENDS = ("interpreted", "generated", "onnx")
Array = np.ndarray[Any, Any]


def _weights() -> dict[str, Array]:
    spec = importlib.util.spec_from_file_location(
        "inputs_llama_weights", EXAMPLE / "make_weights.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    weights: dict[str, Array] = module.make_weights(CONFIG, seed=5)
    return weights


class Backend:
    """One loaded model behind one calling convention: NumPy in, NumPy out."""

    def __init__(self, name: str, weights: dict[str, Array]) -> None:
        self.name = name
        if name == "onnx":
            self.onnx = load_model(SOURCE, generics=CONFIG, weights=weights)
        else:
            self.torch = linnet_torch.load(
                SOURCE, generics=CONFIG, weights=weights, compile=name == "generated"
            )

    def run(self, entry: str, inputs: list[object] | dict[str, object]) -> Array:
        if self.name == "onnx":
            return np.asarray(self.onnx.run_entry(entry, inputs))
        if isinstance(inputs, dict):
            given: Any = {k: _torch(v) for k, v in inputs.items()}
        else:
            given = [_torch(v) for v in inputs]
        with torch.no_grad():
            return np.asarray(self.torch.run_entry(entry, given).numpy())

    def reset(self) -> None:
        (self.onnx if self.name == "onnx" else self.torch).reset_state()

    def state(self) -> dict[str, Array]:
        if self.name == "onnx":
            return self.onnx.state
        return {k: v.numpy().copy() for k, v in self.torch.state_dict(keep_vars=True).items()}


def _torch(value: object) -> object:
    """NumPy arrays as torch tensors of the same dtype (the torch backends' inputs)."""
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


@pytest.fixture(scope="module")
def backends() -> dict[str, Backend]:
    weights = _weights()
    return {name: Backend(name, weights) for name in BACKENDS}


def ids(*values: int, dtype: Any = np.int32) -> Array:
    return np.array([values], dtype=dtype)


def token(value: int, dtype: Any = np.int32) -> Array:
    return np.array([value], dtype=dtype)


CACHE = "the cache holds `MaxSeq` = 8 positions"
VOCAB = "it indexes axis 0 of `model.embed_tokens.weight`, of length `Vocab` = 11"
REFUSED: list[tuple[str, str, Callable[[], list[object] | dict[str, object]], str]] = [
    ("decode at MaxSeq", "decode", lambda: [token(3), 8],
     f"entry `decode`: input `position` 8 is outside 0..7: {CACHE}"),
    ("decode far past the cache", "decode", lambda: [token(3), 1000],
     f"entry `decode`: input `position` 1000 is outside 0..7: {CACHE}"),
    ("decode at -1", "decode", lambda: [token(3), -1],
     f"entry `decode`: input `position` -1 is outside 0..7: {CACHE}"),
    ("prefill past the cache", "prefill", lambda: [ids(1, 2, 3), 6],
     "entry `prefill`: input `start` 6 is outside 0..5: 3 positions are written from it "
     f"and {CACHE}"),
    ("prefill longer than the cache", "prefill", lambda: [ids(*range(9)), 0],
     "entry `prefill`: input `start` can take no value (got 0): 9 positions are written "
     f"from it and {CACHE}"),
    ("token past the vocabulary", "decode", lambda: [token(11), 0],
     f"entry `decode`: input `token` holds 11 at [0], outside 0..10: {VOCAB}"),
    ("token -1", "decode", lambda: [token(-1), 0],
     f"entry `decode`: input `token` holds -1 at [0], outside 0..10: {VOCAB}"),
    ("forward with an id past the vocabulary", "forward", lambda: [ids(1, 2, 40, 3)],
     f"entry `forward`: input `tokens` holds 40 at [0, 2], outside 0..10: {VOCAB}"),
    ("int64 id past i32", "prefill", lambda: [ids(1, 2**40, dtype=np.int64), 0],
     f"entry `prefill`: input `tokens` holds {2**40} at [0, 1], outside 0..10: {VOCAB}"),
    ("an extra positional input", "decode", lambda: [token(3), 1, 2],
     "entry `decode` takes 2 inputs (`token`, `position`) but 3 were given"),
    ("a missing input", "decode", lambda: [token(3)],
     "entry `decode`: missing input `position` (inputs: `token`, `position`)"),
    ("an unknown input name", "decode", lambda: {"token": token(3), "pos": 1},
     "entry `decode` has no input `pos` (inputs: `token`, `position`)"),
    ("a float for an i32 scalar", "decode", lambda: [token(3), 3.5],
     "entry `decode`: input `position` is i32; got a Python float (3.5)"),
    ("2**31 for an i32 scalar", "decode", lambda: [token(3), 2**31],
     "entry `decode`: input `position` 2147483648 is outside -2147483648..2147483647: "
     "the input is i32"),
    ("a bool for an i32 scalar", "decode", lambda: [token(3), True],
     "entry `decode`: input `position` is i32; got a Python bool (True)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "make", "message"),
    [pytest.param(entry, make, message, id=case) for case, entry, make, message in REFUSED],
)
def test_each_backend_refuses_with_one_message(
    backends: dict[str, Backend],
    entry: str,
    make: Callable[[], list[object] | dict[str, object]],
    message: str,
) -> None:
    got: dict[str, str] = {}
    for name, backend in backends.items():
        backend.reset()
        backend.run("prefill", [ids(4, 5), 0])
        before = backend.state()
        with pytest.raises(LinnetError) as raised:
            backend.run(entry, make())
        got[name] = str(raised.value)
        after = backend.state()
        assert before.keys() == after.keys()
        for path, value in before.items():  # refused before anything ran
            np.testing.assert_array_equal(after[path], value, err_msg=f"{name}: {path}")
    assert got == dict.fromkeys(BACKENDS, message)


def test_the_last_positions_of_the_cache_are_accepted(backends: dict[str, Backend]) -> None:
    """The exact edges: `decode` at 7 and `prefill` of 3 tokens at 5 fill the cache."""
    for backend in backends.values():
        backend.reset()
        backend.run("prefill", [ids(1, 2, 3), 5])
        assert backend.run("decode", [token(10), 7]).shape == (1, 11)
        backend.run("prefill", [ids(*range(8)), 0])


def test_int64_ids_and_numpy_scalars_cross_as_i32(backends: dict[str, Backend]) -> None:
    """What a tokenizer returns (int64) gives the logits of the i32 call, on every backend."""
    for name, backend in backends.items():
        backend.reset()
        plain = backend.run("prefill", [ids(1, 2, 3), 0])
        plain_step = backend.run("decode", [token(4), 3])
        backend.reset()
        wide = backend.run("prefill", [ids(1, 2, 3, dtype=np.int64), np.int64(0)])
        wide_step = backend.run("decode", {"token": token(4, np.int64), "position": np.int64(3)})
        np.testing.assert_array_equal(wide, plain, err_msg=name)
        np.testing.assert_array_equal(wide_step, plain_step, err_msg=name)


WIDE = """module wide
pub block Shift<N: Dim> {
    pub entry forward(x: Tensor[N; i32]) -> Tensor[N; i32] {
        return x + 1
    }
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_wider_integers_must_fit_the_declared_dtype(backend: str) -> None:
    """An input that is no index still gets its values checked against the declared i32."""
    if backend == "onnx":
        model: Any = load_model(WIDE, generics={"N": 3})
        run = model.run_entry
    else:
        model = linnet_torch.load(WIDE, generics={"N": 3}, compile=backend == "generated")

        def run(entry: str, inputs: list[object]) -> object:
            return model.run_entry(entry, [_torch(v) for v in inputs])

    fits = np.array([1, -(2**31), 2**31 - 2], np.int64)
    np.testing.assert_array_equal(np.asarray(run("forward", [fits])), fits + 1)
    with pytest.raises(LinnetError) as raised:
        run("forward", [np.array([1, 2**31, 3], np.int64)])
    assert str(raised.value) == (
        "entry `forward`: input `x` holds 2147483648 at [1], outside "
        "-2147483648..2147483647: the input is i32"
    )


def test_values_on_the_device_skip_the_check(backends: dict[str, Backend]) -> None:
    """An `OrtValue` is not read back: its out-of-range position reaches the graph,
    whose in-place write then drops it, as the canonical `write_span` does."""
    model = backends["onnx"].onnx
    model.reset_state()
    model.run_entry("decode", [token(3), model.place(np.int32(8))])
    assert all(not value.any() for value in model.state.values())


PICK = """module pick
pub entry pick<N: Dim>(x: Tensor[N; f32], i: i32) -> f32 {
    return x[i]
}
"""


@pytest.mark.parametrize("compile", [False, True])
def test_module_level_entries_check_their_inputs(compile: bool) -> None:
    """`load_function`: the extent of an input tensor, by number (no member declares it)."""
    pick = linnet_torch.load_function(PICK, "pick", compile=compile)
    x = torch.arange(5, dtype=torch.float32)
    assert float(pick(x, 4)) == 4.0
    assert float(pick(x, np.int64(2))) == 2.0
    with pytest.raises(LinnetError) as raised:
        pick(x, 5)
    assert str(raised.value) == (
        "entry `pick`: input `i` 5 is outside 0..4: it indexes axis 0 of input `x`, of length 5"
    )
    with pytest.raises(LinnetError, match=r"takes 2 inputs \(`x`, `i`\) but 3 were given"):
        pick(x, 1, 2)
