"""The Llama example's Python scripts (examples/01-llama/*.py) as modules, for tests.

The example folder is no package, so each script is loaded from its file once, under a
name unique to this example (`llama_example_NAME`), and shared by every test that uses it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "01-llama"


def script(name: str) -> ModuleType:
    """examples/01-llama/NAME.py, loaded once per process."""
    unique = f"llama_example_{name}"
    if unique not in sys.modules:
        spec = importlib.util.spec_from_file_location(unique, FOLDER / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        spec.loader.exec_module(module)
    return sys.modules[unique]
