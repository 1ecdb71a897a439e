"""Runtime `for` loops and scans on linnet.jax (language-extensions 1.5).

Every entry of tests/scan_cases.py as generated `jax.numpy` (`lax.scan` over
`jnp.arange(start, stop)`) and as StableHLO text (a `stablehlo.while` writing rows
with `dynamic_update_slice`) parsed back and run by XLA, against its NumPy f64
reference, zero-length ranges included; `jax.grad` through a scan equals eager
PyTorch autograd of the same recurrence.
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

from linnet.pipeline import check_source, compile_entry
from linnet.target import Target

PROGRAM = check_source(SOURCE)


def _function(case: ScanCase):  # type: ignore[no-untyped-def]
    return compile_entry(PROGRAM, Target(entry=case.entry, generics=case.generics)).function


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generated_source_matches_the_reference(case: ScanCase) -> None:
    from linnet.jax.execute import run_function_jax

    results, _ = run_function_jax(_function(case), [np.asarray(x) for x in case.inputs], {}, {})
    check_results(case, results)


STABLEHLO_CASES = ["smooth", "smooth_empty", "ramps", "pair_sums", "rnn_empty", "gru", "counts"]


@pytest.mark.parametrize("case_id", STABLEHLO_CASES)
def test_stablehlo_text_matches_the_reference(case_id: str) -> None:
    from linnet.jax.execute import run_function_jax

    (case,) = [c for c in CASES if c.id == case_id]
    inputs = [np.asarray(x) for x in case.inputs]
    results, _ = run_function_jax(_function(case), inputs, {}, {}, stablehlo=True)
    check_results(case, results)


def test_source_is_lax_scan_and_stablehlo_a_while_with_row_updates() -> None:
    from linnet.jax import export_stablehlo
    from linnet.jax.codegen import generate

    (case,) = [c for c in CASES if c.id == "ramps"]
    fn = _function(case)
    source = generate(fn).source
    assert "lax.scan(scan_step, (x,), jnp.arange(2, 5, dtype=jnp.int64))" in source
    text = export_stablehlo(fn).text
    assert "stablehlo.while" in text and "stablehlo.dynamic_update_slice" in text


def test_jax_grad_through_a_scan_equals_torch_autograd() -> None:
    import jax
    import jax.numpy as jnp

    from linnet.jax import load_source

    (case,) = [c for c in CASES if c.id == "rnn"]
    f = load_source(SOURCE, entry="rnn", generics=case.generics)
    weights = np.linspace(-1.0, 1.0, 6 * 4).astype(np.float32)

    def loss(*args):  # type: ignore[no-untyped-def]
        hs, h = f.apply({}, *args)
        return jnp.sum(hs.reshape(-1) * weights) + jnp.sum(h)

    grads = jax.grad(loss, argnums=tuple(range(5)))(*(jnp.asarray(x) for x in case.inputs))
    xs, w, u, b, h0 = (torch.from_numpy(np.array(x)).requires_grad_() for x in case.inputs)
    h = h0
    rows = []
    for t in range(xs.shape[0]):
        h = torch.tanh(w @ xs[t] + u @ h + b)
        rows.append(h)
    expected = (torch.stack(rows).reshape(-1) * torch.from_numpy(weights)).sum() + h.sum()
    torch_grads = torch.autograd.grad(expected, (xs, w, u, b, h0))
    for g, e in zip(grads, torch_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), e.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "case_id", ["smooth", "dominant", "ramps", "pair_sums", "steps_between", "rnn", "gru"]
)
def test_jax_grad_needs_no_x64_scope_from_the_caller(case_id: str) -> None:
    # the loop index is an i64: the function runs in x64_scope, but jax.grad transposes
    # its gather after that scope; 32-bit positions (K.narrow_index) make that work, with
    # the gradients the caller's own x64_scope gives
    import jax
    import jax.numpy as jnp

    from linnet.jax import load_source
    from linnet.jax.dtypes import x64_scope

    (case,) = [c for c in CASES if c.id == case_id]
    f = load_source(SOURCE, entry=case.entry, generics=case.generics)
    inputs = [jnp.asarray(x) for x in case.inputs]
    argnums = tuple(i for i, x in enumerate(inputs) if jnp.issubdtype(x.dtype, jnp.floating))

    def loss(*args):  # type: ignore[no-untyped-def]
        out = f.apply({}, *args)
        results = out if isinstance(out, tuple) else (out,)
        floats = [r for r in results if jnp.issubdtype(r.dtype, jnp.floating)]
        return sum(jnp.sum(jnp.sin(r)) for r in floats)

    grads = jax.grad(loss, argnums=argnums)(*inputs)
    assert not jax.config.read("jax_enable_x64")
    with x64_scope(True):
        expected = jax.grad(loss, argnums=argnums)(*inputs)
    for g, e in zip(grads, expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


@pytest.mark.parametrize("mode", ["source", "stablehlo"])
@pytest.mark.parametrize("steps", [4, 0])
def test_state_assigned_in_a_scan(mode: str, steps: int) -> None:
    from jax_support import check
    from scan_cases import stateful_case

    fn, inputs, weights, state = stateful_case(steps)
    check(fn, inputs, mode, weights, state)  # against the interpreter (tests/ir)


@pytest.mark.parametrize("stablehlo", [False, True], ids=["source", "stablehlo"])
@pytest.mark.parametrize(("name", "generics", "inputs"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grad_export_runs_on_jax(
    stablehlo: bool, name: str, generics: dict[str, int], inputs: list[np.ndarray]
) -> None:
    """`linnet jax|stablehlo --grad`: the differentiated function (backward `for` loops)."""
    from linnet.ir.grad import differentiate_entry
    from linnet.jax.execute import run_function_jax
    from linnet.pipeline import optimize

    fn = compile_entry(check_source(GRAD_SOURCE), Target(entry=name, generics=generics)).function
    differentiated, _ = differentiate_entry(fn)
    got, _ = run_function_jax(optimize(differentiated), inputs, {}, {}, stablehlo=stablehlo)
    for g, e in zip(got, autograd_reference(name, inputs), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
