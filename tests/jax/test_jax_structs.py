"""Struct construction values (language-extensions 2) on linnet.jax, against the NumPy
interpreter: `load_source` (generated jax.numpy) and `load` (StableHLO) hand back an entry's
struct result as the tuple of its fields in declaration order, nested as declared; the
StableHLO function itself has one result per leaf, depth first.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from struct_cases import (
    SOURCE,
    STRUCT_PARAMETER,
    VALUE_CASES,
    VALUES,
    X,
    assert_same_leaves,
    interpret,
    leaves,
    nesting,
)

pytest.importorskip("jax")

import linnet.jax as lj
from linnet.errors import LinnetError


@pytest.mark.parametrize("load", [lj.load_source, lj.load], ids=["source", "stablehlo"])
def test_describe_and_clipped_spread(load: object) -> None:
    assert callable(load)
    describe = load(SOURCE, entry="describe")
    got = describe(X)
    assert nesting(got) == ("*", "*", "*")
    assert_same_leaves(leaves(got), interpret(SOURCE, "describe", [X]))
    clipped = load(SOURCE, entry="clipped_spread")
    assert_same_leaves(leaves(clipped(X)), interpret(SOURCE, "clipped_spread", [X]))


@pytest.mark.parametrize("entry", list(VALUE_CASES))
def test_values(entry: str) -> None:
    inputs, _, nested = VALUE_CASES[entry]
    want = interpret(VALUES, entry, inputs)
    for load in (lj.load_source, lj.load):
        got = load(VALUES, entry=entry)(*inputs)
        assert nesting(got) == nested, (entry, load.__name__)
        assert_same_leaves(leaves(got), want)


def test_stablehlo_has_one_result_per_leaf() -> None:
    describe = lj.load(SOURCE, entry="describe")
    describe(X)
    text = describe.stablehlo_text()
    (signature,) = re.findall(r"func\.func public @main\((.*)", text)
    results = signature.split("->", 1)[1]
    assert re.findall(r"tensor<[^>]*>", results) == [
        "tensor<3xf32>",
        "tensor<3xf32>",
        "tensor<i64>",
    ]


def test_struct_entry_parameters_are_refused_by_name() -> None:
    with pytest.raises(LinnetError, match="input `p` has type `Pair`, which cannot cross"):
        lj.load_source(STRUCT_PARAMETER, entry="f")(np.zeros(2, np.float32))
