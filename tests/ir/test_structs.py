"""Struct construction values (language-extensions 2) on every backend, against NumPy.

A struct value lowers to the tuple of its fields; an entry returning one gives the fields
in declaration order: Python backends a tuple, nested as declared (`linnet.ir.results`),
ONNX one output per leaf, depth first. The reference is the NumPy interpreter
(`linnet.ir.interp`), itself checked against hand-written NumPy; linnet.jax is in
tests/jax/test_jax_structs.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from struct_cases import (
    MORE,
    SOURCE,
    STRUCT_PARAMETER,
    VALUE_CASES,
    VALUES,
    V,
    X,
    assert_same_leaves,
    interpret,
    leaves,
    nesting,
)

import linnet.torch as lt
from linnet.errors import LinnetError
from linnet.onnx import export_function


def _reference() -> tuple[np.ndarray, np.ndarray, int]:
    center = X.sum(0) / np.float32(4)
    spread = np.abs(X - center).max(0)
    return center, spread, 4


@pytest.mark.parametrize("compile", [False, True])
def test_torch(compile: bool) -> None:
    center, spread, count = _reference()
    got = lt.load_function(SOURCE, "describe", compile=compile)(torch.from_numpy(X))
    assert isinstance(got, tuple) and len(got) == 3
    np.testing.assert_allclose(got[0].numpy(), center, rtol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), spread, rtol=1e-6)
    assert got[2].item() == count and got[2].dtype == torch.int64
    clipped = lt.load_function(SOURCE, "clipped_spread", compile=compile)(torch.from_numpy(X))
    np.testing.assert_allclose(clipped.numpy(), np.clip(spread, -1.0, 2.0) * count, rtol=1e-6)


def test_onnx_outputs_are_the_fields_in_order() -> None:
    center, spread, count = _reference()
    exported = export_function(SOURCE, "describe", generics={"R": 4, "N": 3})
    assert [str(io.type) for io in exported.outputs] == ["f32[3]", "f32[3]", "i64[]"]
    got = exported.session().run(None, {"x": X})
    np.testing.assert_allclose(got[0], center, rtol=1e-6)
    np.testing.assert_allclose(got[1], spread, rtol=1e-6)
    assert int(got[2]) == count


def test_nested_structs_tuples_and_vars() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    (values, (scale_first, scale_second)), product = lt.load_function(MORE, "boxed")(x)
    torch.testing.assert_close(values, x)
    assert (scale_first.item(), scale_second.item(), product.item()) == (0.5, 2.0, 1.0)
    exported = export_function(MORE, "boxed", generics={"N": 3})
    flat = exported.session().run(None, {"x": x.numpy()})
    assert [float(np.asarray(v).reshape(-1)[0]) for v in flat[1:]] == [0.5, 2.0, 1.0]


# -- struct values as ordinary values (valid/x2_struct_values.linnet) on every backend -------


def test_interpreter_gives_the_fields_in_order() -> None:
    center, spread, count = _reference()
    got = interpret(SOURCE, "describe", [X])
    assert_same_leaves(got, [center, spread, np.array(count, np.int64)])


def test_values_are_what_numpy_says() -> None:
    """The interpreter itself against hand-written NumPy for the x2 entries."""
    (optional,) = interpret(VALUES, "optional", [V])
    np.testing.assert_allclose(optional, (V + V) + V + np.abs(V) * 2, rtol=1e-6)
    center, spread, count, steps = interpret(VALUES, "looped", *VALUE_CASES["looped"][:1])
    want_center, want_spread = V.copy(), V.copy()
    for _ in range(3):
        want_center, want_spread = want_center + want_spread, want_spread * np.float32(0.5)
    np.testing.assert_allclose(center, want_center, rtol=1e-6)
    np.testing.assert_allclose(spread, want_spread, rtol=1e-6)
    assert (int(count), int(steps)) == (3, 3)
    (fields,) = interpret(VALUES, "optional_fields", [V])
    np.testing.assert_allclose(fields, V * 3 + V, rtol=1e-6)
    first, second, width = interpret(VALUES, "wrapped", [V])
    assert (float(first), float(second), float(width)) == (-2.0, 1.0, 3.0)


@pytest.mark.parametrize("entry", list(VALUE_CASES))
def test_values_on_torch_and_onnx(entry: str) -> None:
    inputs, generics, nested = VALUE_CASES[entry]
    want = interpret(VALUES, entry, inputs)
    for compile in (False, True):
        fn = lt.load_function(VALUES, entry, compile=compile)
        got = fn(*[torch.from_numpy(np.array(a)) for a in inputs])
        assert nesting(got) == nested, (entry, compile)
        assert_same_leaves(leaves(got), want)
    session = export_function(VALUES, entry, generics=generics).session()
    names = [i.name for i in session.get_inputs()]
    # graph exports: one output per leaf, depth first
    assert_same_leaves(session.run(None, dict(zip(names, inputs, strict=True))), want)


def test_struct_entry_parameters_are_refused_by_name() -> None:
    """2.3: struct parameters at the entry boundary are not specified; refused cleanly."""
    wanted = "input `p` has type `Pair`, which cannot cross the entry boundary"
    with pytest.raises(LinnetError, match=wanted):
        lt.load_function(STRUCT_PARAMETER, "f")(torch.zeros(2))
    with pytest.raises(LinnetError, match=wanted):
        export_function(STRUCT_PARAMETER, "f", generics={})
