"""Shared fixtures of the ONNX tests: torch exports that several importer tests read.

An export costs seconds (dynamo Llama ~5-10 s), so each model read by more
than one test is exported once per session into a session folder; the tests
import it into their own folders and compare with the returned torch model.
Without torch or transformers the tests that ask for them are skipped. The
examples with KV caches, exported by `export_model` and imported back, are
shared the same way (`example_imports`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from import_support import ExampleImports
    from torch_exports import TorchExport


def _torch_exports() -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch_exports

    return torch_exports


@pytest.fixture
def torch_exports() -> Any:
    """The `torch_exports` helpers, for tests that export their own model (skips without
    torch or transformers)."""
    return _torch_exports()


@pytest.fixture(scope="session")
def gpt2_torchscript(tmp_path_factory: pytest.TempPathFactory) -> TorchExport:
    """`tiny_gpt2()` (default attention) through the TorchScript exporter at opset 17,
    with an attention mask."""
    te = _torch_exports()
    model = te.tiny_gpt2()
    path = te.export_torchscript(model, tmp_path_factory.mktemp("gpt2") / "gpt2.onnx", opset=17)
    return te.TorchExport(path, model)


@pytest.fixture(scope="session")
def llama_dynamo(tmp_path_factory: pytest.TempPathFactory) -> TorchExport:
    """`tiny_llama()` through the dynamo exporter, `input_ids` only, 2..64 tokens."""
    te = _torch_exports()
    model = te.tiny_llama()
    path = te.export_dynamo(model, tmp_path_factory.mktemp("llama") / "llama.onnx", max_seq=64)
    return te.TorchExport(path, model)


@pytest.fixture(scope="session")
def example_imports(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, bool], ExampleImports]:
    """`get(folder, natives)`: `examples/<folder>` at `EXAMPLE_SIZES` with seed-9 weights,
    each of `EXAMPLE_ENTRIES` exported (`natives` as given) and imported; made on the
    first call for that pair, then shared."""
    from import_support import EXAMPLE_ENTRIES, EXAMPLE_SIZES, export_and_import_example

    made: dict[tuple[str, bool], ExampleImports] = {}

    def get(folder: str, natives: bool = True) -> ExampleImports:
        if (folder, natives) not in made:
            made[folder, natives] = export_and_import_example(
                folder, EXAMPLE_SIZES[folder], 9, EXAMPLE_ENTRIES, tmp_path_factory, natives
            )
        return made[folder, natives]

    return get
