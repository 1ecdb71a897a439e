"""Helpers for the importer's model tests: random weights, running imported source, comparing.

The references are independent of the importer: ONNX Runtime on the original
model, and PyTorch. The imported source runs on `linnet.torch`, with the
weights `import_onnx` wrote (SafeTensors under the ONNX names plus
`bindings.json`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from linnet.onnx import export_model
from linnet.onnx.importer.api import ImportResult, import_onnx

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"
EXAMPLES_DIR = ROOT / "examples"


def imported(model: onnx.ModelProto | Path, folder: Path, name: str = "model") -> ImportResult:
    """`import_onnx` into `folder/name.linnet` with weights in `folder/weights`."""
    return import_onnx(model, output=folder / f"{name}.linnet", weights=folder / "weights")


PROMPT = 5
"""Tokens of the prompt the cached examples' `forward` and `prefill` are exported for."""

EXAMPLE_SIZES: dict[str, dict[str, object]] = {
    "01-llama": {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 3,
                 "Batch": 1, "MaxSeq": 12, "T": "f32"},
    "gpt2": {"Batch": 1, "Vocab": 40, "Positions": 16, "H": 16, "Heads": 2, "Layers": 3,
             "Inner": 32, "MaxSeq": 12},
}  # fmt: skip
"""Small sizes of the examples with KV caches, for export-and-import round trips."""

EXAMPLE_ENTRIES: dict[str, dict[str, object]] = {
    "forward": {"B": 1, "S": PROMPT},
    "prefill": {"S": PROMPT},
    "decode": {},
}
"""Each exported entry of those examples and the generics it adds."""


def example_weights(folder: str, generics: dict[str, object], seed: int) -> dict[str, Any]:
    """Seeded weights for `examples/<folder>` from its own `make_weights.py`.

    01-llama's maker takes the element type `T`; the others take only sizes.
    """
    spec = importlib.util.spec_from_file_location(
        f"example_weights_{folder}", EXAMPLES_DIR / folder / "make_weights.py"
    )
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    sizes = generics if folder == "01-llama" else {k: v for k, v in generics.items() if k != "T"}
    weights: dict[str, Any] = maker.make_weights(sizes, seed=seed)
    return weights


@dataclass
class ExampleImports:
    """One example with seeded weights, some of its entries exported with `export_model`
    (one model each) and imported back (one folder each)."""

    folder: str
    natives: bool
    generics: dict[str, object]
    weights: dict[str, Any]
    exported: dict[str, Any]  # entry -> `ExportResult`
    results: dict[str, ImportResult]

    @property
    def source(self) -> Path:
        return EXAMPLES_DIR / self.folder / "src" / "lib.linnet"

    def params(self, entry: str) -> set[str | None]:
        """The parameter paths the export of `entry` reads."""
        return {io.path for io in self.exported[entry].inputs if io.role == "param"}


def export_and_import_example(
    folder: str,
    generics: dict[str, object],
    seed: int,
    entries: dict[str, dict[str, object]],
    folders: Any,
    natives: bool = True,
) -> ExampleImports:
    """`examples/<folder>` with `example_weights(seed)`, each entry (with its own extra
    generics) exported and imported into a fresh `folders.mktemp(entry)`."""
    weights = example_weights(folder, generics, seed)
    case = ExampleImports(folder, natives, dict(generics), weights, {}, {})
    for entry, extra in entries.items():
        case.exported[entry] = export_model(
            case.source,
            generics={**generics, **extra},
            weights=weights,
            entry=entry,
            std_root=STDLIB,
            natives=natives,
        )
        case.results[entry] = imported(case.exported[entry].model, folders.mktemp(entry), entry)
    return case


def load_imported(result: ImportResult) -> Any:
    """The imported source as a `linnet.torch` module, bound to the weights the import wrote."""
    import linnet.torch as lt

    assert result.weights is not None
    return lt.load(
        result.output,
        weights=result.weights,
        bindings=result.weights.parent / "bindings.json",
        std_root=STDLIB,
    )


def run_imported(result: ImportResult, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The imported entry on `linnet.torch`, bound to the weights the import wrote."""
    import torch

    module = load_imported(result)
    with torch.no_grad():
        out = module.run_entry(
            result.entry, [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        )
    outs = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() if hasattr(o, "detach") else np.asarray(o) for o in outs]


def check_logits(
    result: ImportResult,
    model: Any,
    batch: int,
    lengths: tuple[int, ...],
    mask: bool = False,
    padded: bool = False,
) -> None:
    """The imported entry's logits against the transformers `model`'s (1e-4), on seeded
    random tokens `[batch, length]` for each length.

    With `mask` the entry also takes an `attention_mask` (all ones); `padded` masks
    the first token of row 1, so a per-row mask is not causal alone.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    for length in lengths:
        ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=gen)
        inputs = {"input_ids": ids}
        if mask or padded:
            inputs["attention_mask"] = torch.ones(batch, length, dtype=torch.int64)
            if padded:
                inputs["attention_mask"][1, :1] = 0
        with torch.no_grad():
            expected = model(**inputs, use_cache=False).logits.numpy()
        (actual,) = run_imported(result, [t.numpy() for t in inputs.values()])
        close(actual, expected, rtol=1e-4, atol=1e-4)


def run_onnxruntime(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> list[Any]:
    import onnxruntime as ort

    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
