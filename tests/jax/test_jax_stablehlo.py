"""`linnet stablehlo` and `linnet jax` (language.md 18.3): text that MLIR parses and XLA runs.

The command prints the Llama example's entries as StableHLO; the text is
parsed with the MLIR Python bindings that ship with jaxlib (which also read
the `linnet.*` contract attributes back), compiled by the XLA client
directly (not through linnet), run on random weights bound by the contract,
and compared with `linnet.torch` on the same weights: `forward`, and the
stateful `prefill` + `decode` whose state goes in and comes out by path.
A function with one op of every family (control flow included) goes through
the StableHLO path against the NumPy interpreter (the whole op matrix on
that path is a slow check in test_jax_ops.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

from backend_cases import assert_close  # noqa: E402
from jax._src.interpreters import mlir as jax_mlir  # noqa: E402
from jax_support import check  # noqa: E402
from jaxlib.mlir import ir  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.cli import main  # noqa: E402
from linnet.ir.core import Builder, TensorType, Value  # noqa: E402
from linnet.jax.stablehlo import parse_contract  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples/01-llama/src/lib.linnet"
STD = ROOT / "stdlib"
ROOT_GENERICS = {"Vocab": 11, "H": 8, "Heads": 2, "KvHeads": 1, "Inner": 16, "Layers": 2,
                 "Batch": 1, "MaxSeq": 8, "T": "f32"}  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--no-color", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def print_entry(capsys: pytest.CaptureFixture[str], command: str, entry: str, **own: int) -> str:
    generics = {**ROOT_GENERICS, **own}
    binds = [a for k, v in generics.items() for a in ("--bind", f"{k}={v}")]
    status, out, err = run(
        capsys, command, "--std", str(STD), "--entry", entry, "--optionals", "absent", *binds,
        str(LLAMA),
    )  # fmt: skip
    assert (status, err) == (0, "")
    return out


@pytest.fixture(scope="module")
def llama() -> tuple[Any, dict[str, np.ndarray]]:
    probe = lt.load(LLAMA, generics=ROOT_GENERICS, std_root=STD, trainable=True)
    rng = np.random.default_rng(0)
    weights = {
        path: rng.normal(0, 0.3, tuple(t.shape)).astype(np.float32)
        for path, t in probe.state_dict().items()
    }
    model = lt.load(LLAMA, generics=ROOT_GENERICS, weights=weights, std_root=STD)
    return model, weights


def compile_text(text: str) -> tuple[Any, Any]:
    """The text parsed by MLIR (contract read back) and compiled by the XLA client."""
    module = ir.Module.parse(text, jax_mlir.make_ir_context())
    contract = parse_contract(module)
    client = jax.devices("cpu")[0].client
    return contract, client.compile_and_load(text, jax.devices("cpu")[:1])


def test_forward_text_runs_on_xla(capsys: pytest.CaptureFixture[str], llama: Any) -> None:
    model, weights = llama
    text = print_entry(capsys, "stablehlo", "forward", B=2, S=5)
    assert "stablehlo.dot_general" in text and "tensor<2x5xi32>" in text
    contract, executable = compile_text(text)
    assert contract.entry == "forward" and contract.inputs == ("tokens",)
    assert contract.params[0] == "model.embed_tokens.weight" and contract.results == 1
    assert contract.state == () and contract.next_state == ()
    tokens = np.random.default_rng(1).integers(0, 11, (2, 5)).astype(np.int32)
    args = [tokens, *(weights[p] for p in contract.params)]
    (logits,) = executable.execute([jax.device_put(a) for a in args])
    expected = model(torch.from_numpy(tokens)).numpy()
    assert_close(np.asarray(logits), expected, "f32", scale=4.0)


def test_stateful_entries_carry_state_by_path(
    capsys: pytest.CaptureFixture[str], llama: Any
) -> None:
    model, weights = llama
    model.reset_state()
    prefill_contract, prefill = compile_text(print_entry(capsys, "stablehlo", "prefill", S=3))
    decode_contract, decode = compile_text(print_entry(capsys, "stablehlo", "decode"))
    assert decode_contract.inputs == ("token", "position")
    assert set(decode_contract.next_state) <= set(decode_contract.state)
    assert len(decode_contract.state) == 4 and decode_contract.state[0].endswith("k_cache")
    state = {p: np.zeros(tuple(model.tensor(p).shape), np.float32) for p in decode_contract.state}

    def step(contract: Any, executable: Any, inputs: list[np.ndarray]) -> np.ndarray:
        args = [*inputs, *(weights[p] for p in contract.params)]
        args += [state[p] for p in contract.state]
        out = executable.execute([jax.device_put(a) for a in args])
        updates = zip(contract.next_state, out[contract.results :], strict=True)
        state.update({p: np.asarray(v) for p, v in updates})
        return np.asarray(out[0])

    prompt = np.array([[3, 7, 1]], np.int32)
    assert prefill_contract.inputs == ("tokens", "start")
    got = step(prefill_contract, prefill, [prompt, np.array(0, np.int32)])
    start = torch.tensor(0, dtype=torch.int32)
    expected = model.run_entry("prefill", [torch.from_numpy(prompt), start]).numpy()
    assert_close(got, expected, "f32", scale=4.0)
    for position, token in enumerate([5, 2], start=3):
        inputs = [np.array([token], np.int32), np.array(position, np.int32)]
        got = step(decode_contract, decode, inputs)
        torch_inputs = [torch.from_numpy(inputs[0]), torch.tensor(position, dtype=torch.int32)]
        expected = model.run_entry("decode", torch_inputs).numpy()
        assert_close(got, expected, "f32", scale=4.0)


def test_jax_command_prints_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    out = print_entry(capsys, "jax", "forward", B=1, S=2)
    assert out.startswith("# entry forward(tokens: i32[1,2])")
    assert "def entry(W, S, tokens):" in out and "K.contract(" in out
    compile(out, "<printed>", "exec")


def test_errors(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "stablehlo", "--std", str(STD), "--bind", "Vocab=11", str(LLAMA))
    assert status == 1 and out == "" and "missing generic" in err
    status, _, err = run(capsys, "stablehlo", str(LLAMA), str(LLAMA))
    assert status == 2 and "exactly one file" in err
    status, _, err = run(capsys, "jax", "--optionals", "maybe", str(LLAMA))
    assert status == 2 and "`--optionals`" in err


F32 = TensorType((4,), "f32")


def test_every_op_family_through_stablehlo() -> None:
    """One function: elementwise, casts, shapes, gathers, reductions, contraction, while, if."""
    b = Builder.for_function([("x", TensorType((3, 4), "f32")), ("i", TensorType((2,), "i32")),
                              ("n", TensorType((), "i32")), ("u", TensorType((3, 4), "u64"))])  # fmt: skip
    x, i, n, u = b.args
    w = b.param("w", TensorType((4, 5), "f32"))
    s = b.state("s", F32)
    e = b.unary("exp", b.binary("mul", x, b.const(0.5, "f32")))
    q = b.binary("div", b.cast(x, "i16"), b.const(3, "i16"))
    r = b.binary("rem", u, b.const(7, "u64"))
    shr = b.binary("shr", u, b.const(33, "u64"))
    mm = b.contract(e, w, lhs_contract=(1,), rhs_contract=(0,))
    g = b.gather(mm, i, 0)
    t = b.take(x, i, b.const(np.array([1, 3], np.int64), "i64"))
    red = b.reduce(b.permute(mm, (1, 0)), "max", (1,))
    halves = [b.slice(x, (0, 0), (3, 4), (1, 2)), b.slice(x, (0, 1), (3, 3))]
    cat = b.concat(halves, 1)
    minus = b.broadcast(b.const(-1.0, "f32"), (3, 4))
    sel = b.select(b.binary("gt", x, b.const(0.0, "f32")), x, minus)

    def cond(inner: Builder, c: tuple[Value, ...]) -> list[Value]:
        return [inner.binary("lt", c[0], n)]

    def body(inner: Builder, c: tuple[Value, ...]) -> list[Value]:
        grown = inner.binary("add", inner.binary("mul", c[1], inner.const(1.5, "f32")), s)
        return [inner.binary("add", c[0], inner.const(1, "i32")), grown]

    row = b.reshape(b.slice(x, (0, 0), (1, 4)), (4,))
    _, acc = b.while_([b.const(0, "i32"), row], cond, body)
    (branch,) = b.if_(
        b.binary("gt", n, b.const(1, "i32")),
        lambda inner, _: [inner.unary("neg", acc)],
        lambda inner, _: [inner.binary("sub", acc, inner.const(1.0, "f32"))],
    )
    fn = b.finish_function("mix", [q, r, shr, g, t, red, cat, sel, branch], {"s": branch})
    rng = np.random.default_rng(3)
    inputs = [
        rng.uniform(-4, 4, (3, 4)).astype(np.float32),
        np.array([2, 0], np.int32),
        np.array(3, np.int32),
        rng.integers(0, 2**64 - 1, (3, 4), dtype=np.uint64, endpoint=True),
    ]
    weights = {"w": rng.uniform(-1, 1, (4, 5)).astype(np.float32)}
    state = {"s": rng.uniform(-1, 1, 4).astype(np.float32)}
    for mode in ("source", "stablehlo"):
        check(fn, inputs, mode, weights, state)
