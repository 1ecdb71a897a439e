"""Helpers for the tests of examples/01-linear, 02-attention, 03-tiny-transformer, vit and clip.

Each example ships a `make_weights.py`; the tests import it by path, write its
SafeTensors file into a temporary folder, bind that file with
`linnet.torch.load` and give the same tensors to an independent reference
(PyTorch eager, transformers, or NumPy f64).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

from linnet.weights import read_safetensors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Both execution paths of `linnet.torch.load`: interpreted IR and generated source.
COMPILE = (False, True)


def example_script(example: str, name: str = "make_weights") -> ModuleType:
    """`examples/<example>/<name>.py` as a module (a unique name per example)."""
    path = EXAMPLES / example / f"{name}.py"
    module_name = f"vision_examples_{example.replace('-', '_')}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a SafeTensors file as a NumPy array (copies, writable)."""
    return {name: np.array(array) for name, array in read_safetensors(path).items()}


def assert_close(actual: object, expected: object, tolerance: float, what: str) -> None:
    """Max absolute difference within `tolerance`, after checking the shapes agree."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape}, expected {e.shape}"
    gap = float(np.max(np.abs(a - e))) if a.size else 0.0
    assert gap <= tolerance, f"{what}: max |difference| {gap:.3g} > {tolerance:g}"
