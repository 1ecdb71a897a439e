"""Shared by the JAX importer tests: import a JAX function and compare it with JAX.

`check` captures `fn(params, *inputs)` through `linnet.jax.export_linnet`,
runs the generated source on `linnet.torch` bound to the weights the import
wrote (by the parameter pytree's dotted paths), and requires JAX's own
outputs (the independent reference) to 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch

import linnet.torch as lt
from linnet.jax import export_linnet
from linnet.jax.importer.api import flatten_params
from linnet.sourcegen.finish import ImportResult
from linnet.weights import read_safetensors

ROOT = Path(__file__).resolve().parents[1]
STD = ROOT / "stdlib"
RNG = np.random.default_rng(0)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run(result: ImportResult, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    assert result.weights is not None
    module = lt.load(
        result.output,
        weights=result.weights,
        bindings=result.weights.parent / "bindings.json",
        std_root=STD,
    )
    with torch.no_grad():
        out = module.run_entry(result.entry, [torch.from_numpy(np.asarray(x)) for x in inputs])
    outs = list(out) if isinstance(out, tuple | list) else [out]
    return [o.numpy() for o in outs]


def check(fn: Any, params: Any, inputs: tuple[Any, ...], folder: Path) -> ImportResult:
    """Imported through `export_linnet`, equal to JAX (1e-5), weights saved by path."""
    result = export_linnet(
        fn, params, inputs, output=folder / "model.linnet", weights=folder / "weights"
    )
    expected = jax.jit(fn)(params, *inputs)
    flat = jax.tree_util.tree_leaves(expected)  # nested tuples: the leaves, in order
    got = run(result, inputs)
    assert len(got) == len(flat)
    for g, e in zip(got, flat, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5, atol=1e-5)
    if result.parameters:
        assert result.weights is not None
        saved = read_safetensors(result.weights)
        by_path = flatten_params(params)
        for path, stored in result.parameters.items():
            # A path Linnet spells differently is bound through bindings.json.
            assert stored in by_path and (path == stored or result.bindings[path] == stored)
            np.testing.assert_array_equal(saved[stored], np.asarray(by_path[stored]))
    return result
