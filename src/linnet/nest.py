"""`linnet.nest`: model cards loaded on any backend, and checked for every problem at once.

Stage: the user's front door to a model (issue 14). A card is a folder with a
`nest.toml` (`linnet.card`: name, source, root, entry, generics, weights,
bindings, tokenizer, license), its Linnet source, and a `README.md`.

- `load(card, backend=...)` loads it on `torch` (`linnet.torch.load`),
  `onnx_model` (`linnet.onnx.load_model`) or `jax` (`linnet.jax.load_model`);
  keyword overrides go to that loader, and `generics=` overrides single
  generics of the card (`{"Batch": 8}`).
- `check(card)` returns every problem as a list of lines (empty: the card is
  sound): the card file, the source's diagnostics, the root block and its
  generics, the entry, every parameter bound with the declared shape and dtype,
  stored tensors and bindings that bind nothing, the tokenizer and its
  vocabulary against the `Vocab` generic, `README.md`, `name` and `license`.
  It reads tensor headers only, never the tensors.

Both also take a local transformers folder of a known family (a `config.json`
and no `nest.toml`): `linnet.convert` writes its card into a temporary folder
first (`opened`), and a refusal comes back as the problems of `check`.
Nothing here touches the network.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from linnet.card import CARD_NAME, Card, is_card, read_card
from linnet.errors import LinnetError

BACKENDS = ("torch", "onnx_model", "jax")
README = "README.md"


def is_transformers_folder(path: str | os.PathLike[str]) -> bool:
    """A folder with a `config.json` and no `nest.toml`: what `linnet.convert` reads."""
    folder = Path(path)
    return folder.is_dir() and (folder / "config.json").is_file() and not is_card(folder)


@contextmanager
def opened(card: str | os.PathLike[str]) -> Iterator[Card]:
    """The card in `card`, or that of a transformers folder converted into a temporary
    folder, which lives until the block ends (the weights stay where they are)."""
    if is_transformers_folder(card):
        from linnet.convert import convert

        with tempfile.TemporaryDirectory(prefix="linnet-nest-") as temp:
            yield convert(card, output=Path(temp) / "card")
        return
    if not Path(card).is_dir():
        raise LinnetError(f"`{card}` is not a folder; a model card is a folder with {CARD_NAME}")
    if not is_card(card):
        raise LinnetError(
            f"`{card}` holds no {CARD_NAME} and no config.json: neither a model card nor a "
            "transformers folder"
        )
    yield read_card(card)


def load(card: str | os.PathLike[str], backend: str = "torch", **overrides: Any) -> Any:
    """The model of `card` on `backend` (see the module docstring).

    `overrides` are the loader's keyword arguments (`device=`, `compile=`,
    `providers=`, `weights=`, `root=` ...); `generics=` is merged over the
    card's generics.
    """
    if backend not in BACKENDS:
        raise LinnetError(
            f"nest.load: `backend` takes {', '.join(f'`{b}`' for b in BACKENDS)}, not `{backend}`"
        )
    with opened(card) as found:
        return _load(found, backend, overrides)


def _load(card: Card, backend: str, overrides: dict[str, Any]) -> Any:
    arguments: dict[str, Any] = {
        "root": card.root,
        "weights": card.weights,
        "bindings": card.bindings,
        **overrides,
    }
    if "weights" in overrides and "bindings" not in overrides:
        arguments["bindings"] = None  # the card's bindings go with its own weights
    arguments["generics"] = {**card.generics, **(overrides.get("generics") or {})}
    if backend == "torch":
        try:
            import linnet.torch as loader
        except ImportError:
            raise LinnetError("backend `torch` needs PyTorch (pip install torch)") from None
        return loader.load(card.source, **arguments)
    if backend == "onnx_model":
        from linnet.onnx.runtime.model import load_model

        return load_model(card.source, **arguments)
    try:
        import linnet.jax as jax_loader
    except ImportError:
        raise LinnetError("backend `jax` needs JAX (pip install jax)") from None
    return jax_loader.load_model(card.source, **arguments)


def check(card: str | os.PathLike[str]) -> list[str]:
    """Every problem of `card`, one line each; empty when the card is sound."""
    try:
        with opened(card) as found:
            return _check(found)
    except LinnetError as exc:
        return [exc.message]


def _check(card: Card) -> list[str]:
    problems = _card_fields(card)
    if not (card.folder / README).is_file():
        problems.append(f"{README} is missing: describe the model, its data and its limits")
    model = _bound_model(card, problems)
    if model is not None:
        if card.entry is not None and card.entry not in model.entries:
            listed = ", ".join(f"`{n}`" for n in model.entries) or "none"
            problems.append(f"entry `{card.entry}` is not an entry of the root (entries: {listed})")
        problems += _weight_problems(card, model)
    problems += _tokenizer_problems(card, model)
    return problems


def _card_fields(card: Card) -> list[str]:
    path = card.folder / CARD_NAME
    data = tomllib.loads(path.read_text(encoding="utf-8"))  # read_card parsed it already
    problems = []
    if not str(data.get("name", "")).strip():
        problems.append(f"{CARD_NAME}: `name` is missing")
    if not (card.license or "").strip():
        problems.append(f'{CARD_NAME}: `license` is missing (an SPDX id: license = "apache-2.0")')
    for key in ("source", "weights", "bindings", "tokenizer"):
        for where in _card_paths(getattr(card, key)):
            if not where.exists():
                problems.append(f"{CARD_NAME}: `{key}` names {where}, which does not exist")
    return problems


def _card_paths(value: Path | tuple[Path, ...] | None) -> tuple[Path, ...]:
    """A card field's paths: none, one, or the list `weights` may hold."""
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)


def _bound_model(card: Card, problems: list[str]) -> Any:
    """The card's root block bound with its generics; None (and the reasons appended)
    when the source has errors or the block does not bind."""
    from linnet import pipeline

    if not card.source.exists():
        return None
    try:
        program = pipeline.check_paths([card.source])
    except LinnetError as exc:
        problems.append(f"source: {exc.message}")
        return None
    errors = [d for d in program.diagnostics if d.is_error]
    for diagnostic in errors:
        problems.append(f"source: {_where(diagnostic)}{diagnostic.code}: {diagnostic.message}")
    if errors:
        return None
    try:
        return pipeline.bind(program, root=card.root, generics=card.generics)
    except LinnetError as exc:
        problems.append(f"root block: {exc.message}")
        return None


def _where(diagnostic: Any) -> str:
    span = diagnostic.span
    if span is None:
        return ""
    line, column = span.file.line_col(span.start)
    return f"{span.file.path}:{line}:{column}: "


def _weight_problems(card: Card, model: Any) -> list[str]:
    from linnet.weights import require_no_weights, specs_from_model, weight_problems

    if card.weights is None:
        try:
            require_no_weights(model, '; the card names none (weights = "...")')
        except LinnetError as exc:
            return [f"weights: {exc.message}"]
        return []
    if not all(path.exists() for path in _card_paths(card.weights)):
        return []  # reported with the card's fields
    try:
        found = weight_problems(specs_from_model(model), card.weights, bindings=card.bindings)
    except LinnetError as exc:
        return [f"weights: {exc.message}"]
    return [f"weights: {p}" for p in found]


def _tokenizer_problems(card: Card, model: Any) -> list[str]:
    if card.tokenizer is None or not card.tokenizer.exists():
        return []
    from linnet.serve.tokenizer import Tokenizer

    try:
        tokenizer = Tokenizer.from_folder(card.tokenizer)
    except LinnetError as exc:
        return [f"tokenizer: {exc.message}"]
    except ImportError:
        return ["tokenizer: the `tokenizers` library is not installed (pip install tokenizers)"]
    vocab = None if model is None else model.generics.get("Vocab")
    if isinstance(vocab, int) and tokenizer.vocab_size > vocab:
        return [
            f"tokenizer: it produces {tokenizer.vocab_size} ids but the generic `Vocab` is "
            f"{vocab}; ids from {vocab} on have no embedding row"
        ]
    return []


def summary(card: Card) -> str:
    """One line naming the card: its name, root block and license."""
    return f"{card.name} ({card.root or 'root block'}, license {card.license or 'none'})"
