"""`LinnetModel`: what a `LINNET_MODEL` socket carries from one ComfyUI node to the next.

Stage: the node pack's model handle (issue 19). In: a source file or package,
its generics and weights, or a model card folder (`linnet.card`), and a backend
(`torch` through `linnet.torch.load`, `onnx` through `linnet.onnx.load_model`)
and device. Out: one object the nodes share, whatever the backend:

- `run(entry, inputs, names, generics)` takes and returns torch tensors (ComfyUI
  passes torch tensors between nodes), after `linnet.comfyui.signature` has
  checked them against the entry's declared types;
- `describe()` and `parameter_count` for the Model info node;
- `reset_state()` zeroes the model's state members and the engine's cache rows;
- `engine()` is the `linnet.serve.Engine` over the model, made on first use and
  kept, so that text generation reuses its lowered entries.

The backends are used as they are: their own input checks still run, so a
mistake the signature check lets through is caught there with its own message.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from linnet.card import is_card, read_card
from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel

BACKENDS = ("torch", "onnx")
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> torch.device:
    """`auto` is the first CUDA device when torch sees one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in DEVICES:
        raise LinnetError(f"`device` takes {', '.join(DEVICES)}, not `{device}`")
    if device == "cuda" and not torch.cuda.is_available():
        raise LinnetError("`device` is `cuda` but torch sees no CUDA device; choose `cpu`")
    return torch.device(device)


class LinnetModel:
    """A loaded Linnet model on one backend (see the module docstring)."""

    def __init__(
        self,
        runner: Any,
        *,
        name: str,
        backend: str,
        device: torch.device,
        entry: str | None = None,
        tokenizer: Path | None = None,
    ) -> None:
        self.runner = runner
        self.name = name
        self.backend = backend
        self.device = device
        self.entry = entry
        self.tokenizer = tokenizer
        self._engine: Any = None
        self._tokenizers: dict[Path, Any] = {}

    @property
    def bound(self) -> BoundModel:
        """The bound model: root block, tensor paths, entry signatures."""
        found: BoundModel = (
            self.runner.linnet_model if self.backend == "torch" else self.runner.model
        )
        return found

    @property
    def present(self) -> frozenset[str]:
        """The tensor paths the weights provided (optional ones included when present)."""
        found: frozenset[str] = (
            self.runner.present_paths if self.backend == "torch" else self.runner.present
        )
        return found

    @property
    def entries(self) -> list[str]:
        return list(self.bound.entries)

    def default_entry(self) -> str:
        """The card's entry, else `forward`, else the only entry."""
        entries = self.bound.entries
        for candidate in (self.entry, "forward"):
            if candidate is not None and candidate in entries:
                return candidate
        if len(entries) == 1:
            return next(iter(entries))
        listed = ", ".join(f"`{n}`" for n in entries) or "none"
        raise LinnetError(f"the model has no `forward` entry; name one (entries: {listed})")

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        entry: str,
        inputs: Sequence[torch.Tensor],
        names: Sequence[str] = (),
        generics: Mapping[str, object] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Run `entry` on torch tensors, in order or named by `names`; every result as a
        torch tensor on the model's device. The signature is checked before anything runs."""
        from linnet.comfyui.signature import check_call

        check_call(self.bound, entry, inputs, names, generics)
        given: Sequence[object] | Mapping[str, object]
        if self.backend == "torch":
            moved = [t.to(self.device) for t in inputs]
            given = dict(zip(names, moved, strict=True)) if names else moved
            with torch.no_grad():
                result = self.runner.run_entry(entry, given, generics)
        else:
            from linnet.torch.dtypes import linnet_dtype, to_numpy

            # check_call refused every torch dtype Linnet lacks
            arrays = [to_numpy(t, str(linnet_dtype(t.dtype))) for t in inputs]
            given = dict(zip(names, arrays, strict=True)) if names else arrays
            result = self.runner.run_entry(entry, given, generics=generics)
        results = () if result is None else result if isinstance(result, tuple) else (result,)
        return tuple(self._as_torch(r) for r in results)

    def _as_torch(self, value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value
        from linnet.ir.core import dtype_of_numpy
        from linnet.torch.dtypes import to_torch

        array = np.asarray(value)
        return to_torch(array, dtype_of_numpy(array.dtype), self.device)

    def reset_state(self) -> None:
        """Zero every state member, and drop the engine's requests and cache rows."""
        if self._engine is not None:
            self._engine.reset()
        self.runner.reset_state()

    def engine(self) -> Any:
        """The `linnet.serve.Engine` over this model (made once, then reused)."""
        if self._engine is None:
            from linnet.serve import Engine

            self._engine = Engine(self.runner)
        return self._engine

    def tokenizer_at(self, folder: str | os.PathLike[str] | None) -> Any:
        """The `linnet.serve.tokenizer.Tokenizer` of `folder`, else of the card's tokenizer
        folder (read once each)."""
        from linnet.serve.tokenizer import Tokenizer

        if folder is None:
            if self.tokenizer is None:
                raise LinnetError(
                    f"`tokenizer`: the model `{self.name}` has no card tokenizer; give the "
                    "folder that holds tokenizer.json"
                )
            folder = self.tokenizer
        path = Path(folder).resolve()
        found = self._tokenizers.get(path)
        if found is None:
            if not path.is_dir():
                raise LinnetError(f"`tokenizer`: {path} is not a folder")
            found = self._tokenizers[path] = Tokenizer.from_folder(path)
        return found

    # -- describing --------------------------------------------------------------------------

    def tensor_count(self, kind: str) -> tuple[int, int]:
        """How many tensors of `kind` (`param`, `buffer`, `state`) exist, and their elements."""
        tensors = self.bound.live_tensors(self.present, kind)  # type: ignore[arg-type]
        return len(tensors), sum(math.prod(t.shape) for t in tensors.values())

    @property
    def parameter_count(self) -> int:
        """Elements of every param tensor the model holds (buffers and state not counted)."""
        return self.tensor_count("param")[1]

    def describe(self) -> str:
        """The model in a few lines: root and generics, tensor counts, every entry."""
        from linnet.comfyui.signature import entry_text

        bound = self.bound
        generics = ", ".join(f"{k} = {v}" for k, v in bound.generics.items())
        if self.backend == "onnx":
            from linnet.onnx.runtime.values import provider_name

            place = ", ".join(provider_name(p) for p in self.runner.providers)
        else:
            place = str(self.device)
        lines = [f"{self.name}: {bound.root.info.name}<{generics}> on {self.backend} ({place})"]
        for kind, label in (("param", "parameters"), ("buffer", "buffers"), ("state", "state")):
            count, elements = self.tensor_count(kind)
            if count or kind == "param":
                lines.append(f"{label}: {elements:,} values in {count} tensors")
        lines.append("entries:")
        lines += [f"  {entry_text(sig)}" for sig in bound.entries.values()]
        return "\n".join(lines)


def load_model(
    source: str | os.PathLike[str],
    *,
    generics: Mapping[str, object] | None = None,
    weights: str | os.PathLike[str] | None = None,
    backend: str = "torch",
    device: str = "auto",
    root: str | None = None,
    compile: bool = True,
) -> LinnetModel:
    """Load `source` (a `.linnet` file, a package folder or a card folder) on `backend`.

    A card folder fills what is left out (source, generics, weights, root,
    bindings) and gives the model its name, default entry and tokenizer folder.
    """
    if backend not in BACKENDS:
        raise LinnetError(f"`backend` takes {' or '.join(BACKENDS)}, not `{backend}`")
    path = Path(source)
    if not path.exists():
        raise LinnetError(f"`source`: {path} does not exist (a .linnet file, package or card)")
    if weights is not None and not Path(weights).exists():
        raise LinnetError(f"`weights`: {weights} does not exist (a SafeTensors file or folder)")
    where = resolve_device(device)
    card = read_card(path) if is_card(path) else None
    if backend == "torch":
        import linnet.torch as lt

        runner: Any = lt.load(
            path, generics=generics, weights=weights, root=root, device=where, compile=compile
        )
    else:
        from linnet.onnx.runtime.model import load_model as load_onnx

        providers = ["CUDAExecutionProvider"] if where.type == "cuda" else None
        runner = load_onnx(path, generics=generics, weights=weights, root=root, providers=providers)
    return LinnetModel(
        runner,
        name=card.name if card is not None else path.stem,
        backend=backend,
        device=where if backend == "torch" else torch.device("cpu"),
        entry=card.entry if card is not None else None,
        tokenizer=card.tokenizer if card is not None else None,
    )
