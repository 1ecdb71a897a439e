"""Runtime `for` loops and scans on linnet.torch (language-extensions 1.5), both paths.

Every entry of tests/scan_cases.py (the 1.6 examples, an RNN and a GRU over time,
integer scans, zero-length ranges) through the interpreted runner and the generated
code against its NumPy f64 reference; the generated source is a Python loop with
`torch.stack` (and `torch.empty` for zero rows); gradients through a scan flow with
autograd and equal those of the same recurrences written directly in PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scan_cases import (
    CASE_IDS,
    CASES,
    GRAD_CASES,
    GRAD_SOURCE,
    SOURCE,
    ScanCase,
    autograd_reference,
    check_results,
)

import linnet.torch as lt


def _inputs(case: ScanCase) -> list[torch.Tensor]:
    return [torch.from_numpy(np.array(x)) for x in case.inputs]


@pytest.mark.parametrize("compiled", [False, True], ids=["runner", "codegen"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_scans_match_the_reference(case: ScanCase, compiled: bool) -> None:
    fn = lt.load_function(SOURCE, case.entry, compile=compiled)
    out = fn(*_inputs(case))
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    check_results(case, [r.detach().numpy() for r in results])


def test_generated_source_is_a_python_loop_with_stack() -> None:
    fn = lt.load_function(SOURCE, "ramps", compile=True)
    fn(torch.zeros(3))
    source = fn.generated_source()
    assert "in torch.arange(2, 5, device=DEVICE):" in source
    assert "torch.stack(rows, 0)" in source and "torch.empty" not in source
    (case,) = [c for c in CASES if c.id == "smooth_empty"]
    empty = lt.load_function(SOURCE, "smooth", compile=True)
    empty(*_inputs(case))
    assert "torch.empty((0, 3), dtype=torch.float32, device=DEVICE)" in empty.generated_source()


def _smooth_eager(xs: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    level = torch.zeros(xs.shape[1], dtype=xs.dtype)
    rows = []
    for t in range(xs.shape[0]):
        level = level * decay + xs[t] * (1.0 - decay)
        rows.append(level)
    return torch.stack(rows)


def _rnn_eager(xs, w, u, b, h0):  # type: ignore[no-untyped-def]
    h = h0
    rows = []
    for t in range(xs.shape[0]):
        h = torch.tanh(w @ xs[t] + u @ h + b)
        rows.append(h)
    return torch.stack(rows), h


def _loss(out: object, weights: torch.Tensor) -> torch.Tensor:
    """A weighted sum of the first result, plus the sum of the second (the carried value)."""
    if isinstance(out, (tuple, list)):
        return (out[0].reshape(-1) * weights).sum() + out[1].sum()
    assert isinstance(out, torch.Tensor)
    return (out.reshape(-1) * weights).sum()


@pytest.mark.parametrize("compiled", [False, True], ids=["runner", "codegen"])
def test_gradients_through_scans_equal_eager_autograd(compiled: bool) -> None:
    (smooth,) = [c for c in CASES if c.id == "smooth"]
    (rnn,) = [c for c in CASES if c.id == "rnn"]
    for case, eager in ((smooth, _smooth_eager), (rnn, _rnn_eager)):
        fn = lt.load_function(SOURCE, case.entry, compile=compiled)
        ours = [t.requires_grad_() for t in _inputs(case)]
        theirs = [t.clone().detach().requires_grad_() for t in ours]
        out_theirs = eager(*theirs)
        first = out_theirs[0] if isinstance(out_theirs, tuple) else out_theirs
        weights = torch.linspace(-1.0, 1.0, first.numel())
        grads_ours = torch.autograd.grad(_loss(fn(*ours), weights), ours)
        grads_theirs = torch.autograd.grad(_loss(out_theirs, weights), theirs)
        for g, e in zip(grads_ours, grads_theirs, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_zero_length_scan_keeps_dtype_and_passes_carried_values() -> None:
    (case,) = [c for c in CASES if c.id == "rnn_empty"]
    for compiled in (False, True):
        hs, h = lt.load_function(SOURCE, "rnn", compile=compiled)(*_inputs(case))
        assert hs.shape == (0, 4) and hs.dtype == torch.float32
        torch.testing.assert_close(h, torch.from_numpy(case.inputs[-1]))


@pytest.mark.parametrize("mode", ["runner", "codegen"])
@pytest.mark.parametrize("steps", [4, 0])
def test_state_assigned_in_a_scan(mode: str, steps: int) -> None:
    from scan_cases import stateful_case
    from torch_support import check

    fn, inputs, weights, state = stateful_case(steps)
    check(fn, inputs, mode, weights, state)  # against the interpreter (tests/ir)


@pytest.mark.parametrize("mode", ["runner", "codegen"])
@pytest.mark.parametrize(("name", "generics", "inputs"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grad_export_runs_on_torch(
    mode: str, name: str, generics: dict[str, int], inputs: list[np.ndarray]
) -> None:
    """`linnet torch --grad`: the differentiated function (backward `for` loops included)."""
    from torch_support import run_torch

    from linnet.ir.grad import differentiate_entry
    from linnet.pipeline import check_source, compile_entry, optimize
    from linnet.target import Target

    fn = compile_entry(check_source(GRAD_SOURCE), Target(entry=name, generics=generics)).function
    differentiated, _ = differentiate_entry(fn)
    got, _ = run_torch(optimize(differentiated), inputs, mode)
    for g, e in zip(got, autograd_reference(name, inputs), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
