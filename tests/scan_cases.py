"""Runtime `for` loops and scans (language-extensions 1): one module, inputs and NumPy f64 references.

Shared by the backend tests of scans (tests/ir/test_scans_interp.py,
tests/torch/test_torch_scans.py, tests/onnx/test_onnx_scans.py,
tests/jax/test_jax_scans.py). The entries are the examples of 1.6 (as entries,
so that every backend exports them) plus recurrent cells over time (a tanh RNN
and a GRU) and an integer scan; `CASES` gives each a binding of its generics,
inputs, and a reference written directly in NumPy (float64, loops spelled
out), independent of the Core IR. Zero-length ranges are cases of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SOURCE = """module scans

// 1.6: an exponential moving average of a sequence, kept at every step.
pub entry smooth<Steps: Dim, D: Dim>(
    xs: Tensor[Steps, D; f32],
    decay: f32,
) -> Tensor[Steps, D; f32] {
    var level = fill<f32>([D], 0.0)
    let trace = for t in 0..Steps {
        level = level * decay + xs[t] * (1.0 - decay)
        yield level
    }
    return trace
}

// 1.6: the statement form, eight steps of power iteration carrying `v`.
pub entry dominant<N: Dim>(a: Tensor[N, N; f32], start: Tensor[N; f32]) -> Tensor[N; f32] {
    var v = start
    for _step in 0..8 {
        let w[i] = sum[j] a[i, j] * v[j]
        let norm = sqrt(sum[i] w[i] * w[i])
        v = w / norm
    }
    return v
}

// 1.6: a range starting at 2 and a tuple yield, destructured on the spot.
pub entry ramps<N: Dim>(x: Tensor[N; f32]) -> (Tensor[3; i64], Tensor[3, N; f32]) {
    var shifted = x
    let (squares, rows) = for k in 2..5 {
        shifted = shifted + 1.0
        yield (k * k, shifted)
    }
    return (squares, rows)
}

// 1.6: nested scans with scalar yields build a table; the outer scan is returned directly.
pub entry pair_sums<A: Dim, B: Dim>(u: Tensor[A; f32], v: Tensor[B; f32]) -> Tensor[A, B; f32] {
    return for i in 0..A {
        let row = for j in 0..B {
            yield u[i] + v[j]
        }
        yield row
    }
}

// 1.6: `1..N` needs `N >= 1`; the scan has `N - 1` rows.
pub entry steps_between<N: Dim>(x: Tensor[N; f32]) -> Tensor[N - 1; f32]
where N > 0 {
    let gaps = for k in 1..N {
        yield x[k] - x[k - 1]
    }
    return gaps
}

fn matvec<R: Dim, C: Dim>(m: Tensor[R, C; f32], v: Tensor[C; f32]) -> Tensor[R; f32] {
    let y[r] = sum[c] m[r, c] * v[c]
    return y
}

fn sigmoid<R: Dim>(v: Tensor[R; f32]) -> Tensor[R; f32] {
    return 1.0 / (1.0 + exp(-v))
}

// A tanh RNN over time: every hidden state, and the last one carried out.
pub entry rnn<T: Dim, I: Dim, H: Dim>(
    xs: Tensor[T, I; f32],
    w: Tensor[H, I; f32],
    u: Tensor[H, H; f32],
    b: Tensor[H; f32],
    h0: Tensor[H; f32],
) -> (Tensor[T, H; f32], Tensor[H; f32]) {
    var h = h0
    let hs = for t in 0..T {
        h = tanh(matvec(w, xs[t]) + matvec(u, h) + b)
        yield h
    }
    return (hs, h)
}

// A GRU cell over time, with the step index as a float input feature.
pub entry gru<T: Dim, I: Dim, H: Dim>(
    xs: Tensor[T, I; f32],
    wz: Tensor[H, I; f32],
    uz: Tensor[H, H; f32],
    wr: Tensor[H, I; f32],
    ur: Tensor[H, H; f32],
    wn: Tensor[H, I; f32],
    un: Tensor[H, H; f32],
    h0: Tensor[H; f32],
) -> (Tensor[T, H; f32], Tensor[H; f32]) {
    var h = h0
    let hs = for t in 0..T {
        let x = xs[t] + cast<f32>(t) * 0.125
        let z = sigmoid(matvec(wz, x) + matvec(uz, h))
        let r = sigmoid(matvec(wr, x) + matvec(ur, h))
        let n = tanh(matvec(wn, x) + r * matvec(un, h))
        h = (1.0 - z) * n + z * h
        yield h
    }
    return (hs, h)
}

// Integer carried values and literal yields adopting the annotated dtypes.
pub entry counts<N: Dim>(x: Tensor[N; i32]) -> (Tensor[N; i32], Tensor[N; i8], i32) {
    var total: i32 = 0
    let (running, ones): (Tensor[N; i32], Tensor[N; i8]) = for i in 0..N {
        total = total + x[i]
        yield (total, 1)
    }
    return (running, ones, total)
}
"""

Array = np.ndarray
Reference = Callable[..., Sequence[Array]]


@dataclass(frozen=True)
class ScanCase:
    """One entry bound to generics, with inputs and its NumPy f64 reference."""

    id: str
    entry: str
    generics: dict[str, int]
    inputs: tuple[Array, ...]
    reference: Reference


def _smooth(xs: Array, decay: Array) -> list[Array]:
    level = np.zeros(xs.shape[1])
    rows = []
    for t in range(xs.shape[0]):
        level = level * float(decay) + xs[t] * (1.0 - float(decay))
        rows.append(level)
    return [np.array(rows).reshape(xs.shape)]


def _dominant(a: Array, start: Array) -> list[Array]:
    v = start.astype(np.float64)
    for _ in range(8):
        w = a.astype(np.float64) @ v
        v = w / np.sqrt(np.sum(w * w))
    return [v]


def _ramps(x: Array) -> list[Array]:
    shifted = x.astype(np.float64)
    squares, rows = [], []
    for k in range(2, 5):
        shifted = shifted + 1.0
        squares.append(k * k)
        rows.append(shifted)
    return [np.array(squares, np.int64), np.array(rows)]


def _pair_sums(u: Array, v: Array) -> list[Array]:
    table = np.zeros((len(u), len(v)))
    for i in range(len(u)):
        for j in range(len(v)):
            table[i, j] = float(u[i]) + float(v[j])
    return [table]


def _steps_between(x: Array) -> list[Array]:
    return [np.array([float(x[k]) - float(x[k - 1]) for k in range(1, len(x))])]


def _sigmoid(v: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-v))


def _rnn(xs: Array, w: Array, u: Array, b: Array, h0: Array) -> list[Array]:
    h = h0.astype(np.float64)
    hs = []
    for t in range(xs.shape[0]):
        h = np.tanh(w @ xs[t] + u @ h + b)
        hs.append(h)
    return [np.array(hs).reshape(xs.shape[0], len(h0)), h]


def _gru(xs: Array, wz: Array, uz: Array, wr: Array, ur: Array, wn: Array, un: Array, h0: Array):  # type: ignore[no-untyped-def]
    h = h0.astype(np.float64)
    hs = []
    for t in range(xs.shape[0]):
        x = xs[t] + t * 0.125
        z = _sigmoid(wz @ x + uz @ h)
        r = _sigmoid(wr @ x + ur @ h)
        n = np.tanh(wn @ x + r * (un @ h))
        h = (1.0 - z) * n + z * h
        hs.append(h)
    return [np.array(hs).reshape(xs.shape[0], len(h0)), h]


def _counts(x: Array) -> list[Array]:
    total = 0
    running = []
    for value in x:
        total += int(value)
        running.append(total)
    return [np.array(running, np.int32), np.ones(len(x), np.int8), np.array(total, np.int32)]


def _f32(rng: np.random.Generator, *shape: int) -> Array:
    return rng.standard_normal(shape).astype(np.float32)


def _cases() -> list[ScanCase]:
    rng = np.random.default_rng(20)
    cases = [
        ScanCase(
            "smooth", "smooth", {"Steps": 5, "D": 3}, (_f32(rng, 5, 3), np.float32(0.75)), _smooth
        ),
        ScanCase(
            "smooth_empty",
            "smooth",
            {"Steps": 0, "D": 3},
            (_f32(rng, 0, 3), np.float32(0.5)),
            _smooth,
        ),
        ScanCase("dominant", "dominant", {"N": 4}, (_f32(rng, 4, 4), _f32(rng, 4)), _dominant),
        ScanCase("ramps", "ramps", {"N": 3}, (_f32(rng, 3),), _ramps),
        ScanCase(
            "pair_sums", "pair_sums", {"A": 3, "B": 4}, (_f32(rng, 3), _f32(rng, 4)), _pair_sums
        ),
        ScanCase(
            "pair_sums_empty",
            "pair_sums",
            {"A": 2, "B": 0},
            (_f32(rng, 2), _f32(rng, 0)),
            _pair_sums,
        ),
        ScanCase("steps_between", "steps_between", {"N": 6}, (_f32(rng, 6),), _steps_between),
        ScanCase("steps_between_empty", "steps_between", {"N": 1}, (_f32(rng, 1),), _steps_between),
    ]
    t, i, h = 6, 3, 4
    rnn_inputs = (
        _f32(rng, t, i),
        _f32(rng, h, i) * 0.5,
        _f32(rng, h, h) * 0.5,
        _f32(rng, h),
        _f32(rng, h),
    )
    cases.append(ScanCase("rnn", "rnn", {"T": t, "I": i, "H": h}, rnn_inputs, _rnn))
    empty = (_f32(rng, 0, i), *rnn_inputs[1:])
    cases.append(ScanCase("rnn_empty", "rnn", {"T": 0, "I": i, "H": h}, empty, _rnn))
    gru_inputs = (
        _f32(rng, t, i),
        *(_f32(rng, h, d) * 0.5 for d in (i, h, i, h, i, h)),
        _f32(rng, h),
    )
    cases.append(ScanCase("gru", "gru", {"T": t, "I": i, "H": h}, gru_inputs, _gru))
    x = rng.integers(-50, 50, 7).astype(np.int32)
    cases.append(ScanCase("counts", "counts", {"N": 7}, (x,), _counts))
    return cases


CASES = _cases()
CASE_IDS = [case.id for case in CASES]


def check_results(
    case: ScanCase, got: Sequence[object], rtol: float = 1e-5, atol: float = 1e-5
) -> None:
    """Compare a backend's results (arrays of the declared dtypes) with the f64 reference."""
    expected = case.reference(*case.inputs)
    assert len(got) == len(expected), (case.id, len(got), len(expected))
    for index, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = np.asarray(g)
        e = np.asarray(e)
        assert g.shape == e.shape, (case.id, index, g.shape, e.shape)
        if np.issubdtype(e.dtype, np.integer):
            assert g.dtype == e.dtype, (case.id, index, g.dtype, e.dtype)
            np.testing.assert_array_equal(g, e)
        else:
            assert g.dtype == np.float32, (case.id, index, g.dtype)
            np.testing.assert_allclose(g.astype(np.float64), e, rtol=rtol, atol=atol)


STATEFUL = """module stateful

pub block Acc<D: Dim> {
    param scale: Tensor[D; f32]
    state total: Tensor[D; f32]
    state steps: Tensor[1; i32]

    // A scan that assigns state on every iteration (the writes are visible after it).
    pub entry run<T: Dim>(xs: Tensor[T, D; f32]) -> Tensor[T, D; f32] {
        var h = fill<f32>([D], 0.0)
        let hs = for t in 0..T {
            total = total + xs[t]
            steps = steps + 1
            h = h * 0.5 + scale * xs[t]
            yield h + total
        }
        return hs
    }
}
"""


def stateful_case(steps: int = 4) -> tuple[object, list[Array], dict[str, Array], dict[str, Array]]:
    """The `run` entry of `STATEFUL` lowered for D = 3 and `steps` rows, with inputs, weights and
    a starting state."""
    from linnet.pipeline import check_source, compile_entry
    from linnet.target import Target

    program = check_source(STATEFUL)
    target = Target(root="Acc", entry="run", generics={"D": 3, "T": steps})
    fn = compile_entry(program, target).function
    rng = np.random.default_rng(8)
    inputs = [_f32(rng, steps, 3)]
    weights = {"scale": _f32(rng, 3)}
    state = {"total": _f32(rng, 3), "steps": np.array([5], np.int32)}
    return fn, inputs, weights, state


def stateful_reference(
    inputs: list[Array], weights: dict[str, Array], state: dict[str, Array]
) -> tuple[Array, dict[str, Array]]:
    """`STATEFUL`'s `run` in NumPy f64: its result and the new state."""
    (xs,) = inputs
    total = state["total"].astype(np.float64)
    h = np.zeros(xs.shape[1])
    rows = []
    for x in xs:
        total = total + x
        h = h * 0.5 + weights["scale"] * x
        rows.append(h + total)
    count = np.array([int(state["steps"][0]) + len(xs)], np.int32)
    return np.array(rows).reshape(xs.shape), {"total": total, "steps": count}


# -- `--grad` through scans: f64 losses and PyTorch autograd as the reference ------------------

GRAD_SOURCE = """module losses

fn matvec<R: Dim, C: Dim>(m: Tensor[R, C; f64], v: Tensor[C; f64]) -> Tensor[R; f64] {
    let y[r] = sum[c] m[r, c] * v[c]
    return y
}

// An RNN over time; the loss reads every hidden state (the scan) and the last (carried).
pub entry rnn_loss<T: Dim, I: Dim, H: Dim>(
    xs: Tensor[T, I; f64],
    w: Tensor[H, I; f64],
    u: Tensor[H, H; f64],
    b: Tensor[H; f64],
    h0: Tensor[H; f64],
) -> f64 {
    var h = h0
    let (hs, gates) = for t in 0..T {
        let g = tanh(matvec(w, xs[t]) + matvec(u, h) + b)
        h = h * 0.5 + g * cast<f64>(t + 1)
        yield (h, g * g)
    }
    let weights = iota<f64>(T * H)
    let flat = reshape(hs, [T * H])
    return sum[k] flat[k] * weights[k] + sum[t, j] gates[t, j] + sum[j] h[j] * h[j]
}

// Nested scans from an offset range, a statement loop carrying two values, a counter.
pub entry nested_loss<A: Dim, B: Dim>(u: Tensor[A; f64], v: Tensor[B; f64]) -> f64 {
    let table = for i in 0..A {
        let row = for j in 2..B + 2 {
            yield u[i] * v[j - 2] + sin(u[i])
        }
        yield row
    }
    var acc = v
    var count: i32 = 0
    for k in 1..4 {
        acc = acc * table[k - 1, 0] + cast<f64>(count)
        count = count + 1
    }
    return sum[i, j] table[i, j] * table[i, j] + sum[j] acc[j]
}

// A zero-length scan: its rows carry no gradient, the carried value passes through.
pub entry empty_loss<N: Dim>(x: Tensor[N; f64]) -> f64 {
    var c = x * 2.0
    let rows = for _k in 0..0 {
        c = c * x
        yield c
    }
    return sum[i] c[i] * x[i] + sum[k, i] rows[k, i]
}
"""


def autograd_reference(name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The loss and the gradient of every input by PyTorch autodiff through linnet.torch (f64)."""
    import torch

    import linnet.torch as lt

    fn = lt.load_function(GRAD_SOURCE, name)
    tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
    loss = fn(*tensors)
    grads = torch.autograd.grad(loss, tensors, allow_unused=True)
    return [loss.detach().numpy(), *(g.numpy() for g in grads)]


_GRAD_RNG = np.random.default_rng(6)
GRAD_CASES = [
    (
        "rnn_loss",
        {"T": 5, "I": 3, "H": 4},
        [
            _GRAD_RNG.standard_normal((5, 3)),
            *(_GRAD_RNG.standard_normal(s) * 0.5 for s in ((4, 3), (4, 4), (4,), (4,))),
        ],
    ),
    ("nested_loss", {"A": 4, "B": 3}, [_GRAD_RNG.standard_normal(4), _GRAD_RNG.standard_normal(3)]),
    ("empty_loss", {"N": 3}, [_GRAD_RNG.standard_normal(3)]),
]
