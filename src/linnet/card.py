"""Model cards: a folder whose `nest.toml` says how to load a model without further arguments.

Stage: the loaders' front door (`linnet.torch.load`, `linnet.onnx.load_model`
accept a card folder as their `source`), written by `linnet.convert` and read
later by `linnet.nest` (issue 14). A card is

```toml
name = "tiny-llama"
source = "src/lib.linnet"          # the Linnet source, relative to the card
root = "LlamaForCausalLM"          # the root block
entry = "forward"                  # the entry a caller runs by default
weights = "../tiny-llama"          # SafeTensors file, shard folder or index, or a list of them
bindings = "bindings.json"         # optional: parameter paths -> checkpoint names
tokenizer = "."                    # optional: the folder holding the tokenizer files
license = "apache-2.0"             # optional here; `linnet nest check` asks for it

[generics]
Vocab = 32000
T = "f32"
```

Relative paths are relative to the card folder, so a card and the folder it
references can move together. Reading a card never runs anything it names.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linnet.atomic import write_bytes
from linnet.errors import LinnetError
from linnet.records import record

CARD_NAME = "nest.toml"
_PATH_KEYS = ("source", "weights", "bindings", "tokenizer")


@record(frozen=True)
class Card:
    """A read card; every path absolute. `weights`, `bindings`, `tokenizer` may be absent;
    `weights` is a tuple when the card lists several checkpoints (read as one)."""

    folder: Path
    name: str
    source: Path
    root: str | None
    entry: str | None
    generics: dict[str, object]
    weights: Path | tuple[Path, ...] | None
    bindings: Path | None
    tokenizer: Path | None
    license: str | None = None


def is_card(source: object) -> bool:
    """Whether `source` (a loader's `source=`) names a card folder."""
    if isinstance(source, str) and "\n" in source:
        return False
    if not isinstance(source, str | os.PathLike):
        return False
    path = Path(source)
    return path.is_dir() and (path / CARD_NAME).is_file()


def read_card(folder: str | os.PathLike[str]) -> Card:
    """The card in `folder`; a `LinnetError` lists every problem of its `nest.toml`."""
    base = Path(folder)
    path = base / CARD_NAME
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LinnetError(f"{path}: cannot read the card: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LinnetError(f"{path}: not a valid card: {exc}") from None
    problems: list[str] = []
    known = {"name", "root", "entry", "license", "generics", *_PATH_KEYS}
    problems += [f"unknown key `{k}`" for k in data if k not in known]
    for key in ("name", "root", "entry", "license", *_PATH_KEYS):
        value = data.get(key)
        if key == "weights" and isinstance(value, list) and value:
            if not all(isinstance(v, str) for v in value):
                problems.append("`weights` must be a string or a list of strings")
        elif key in data and not isinstance(value, str):
            problems.append(f"`{key}` must be a string")
    if "source" not in data:
        problems.append("`source` is missing")
    generics = data.get("generics", {})
    if not isinstance(generics, dict) or not all(
        isinstance(v, int | str) and not isinstance(v, bool) for v in generics.values()
    ):
        problems.append("`[generics]` must map names to integers or dtype names")
    if problems:
        raise LinnetError(f"{path}: " + "; ".join(problems))

    def where(key: str) -> Path | None:
        value = data.get(key)
        return None if value is None else (base / str(value)).resolve()

    source = where("source")
    assert source is not None
    weights = data.get("weights")
    listed: tuple[Path, ...] | None = None
    if isinstance(weights, list):
        listed = tuple((base / str(v)).resolve() for v in weights)
    return Card(
        folder=base.resolve(),
        name=str(data.get("name", base.name)),
        source=source,
        root=data.get("root"),
        entry=data.get("entry"),
        generics=dict(generics),
        weights=listed if listed is not None else where("weights"),
        bindings=where("bindings"),
        tokenizer=where("tokenizer"),
        license=data.get("license"),
    )


def write_card(
    folder: Path,
    fields: Mapping[str, str | list[str] | None],
    generics: Mapping[str, object],
) -> None:
    """`folder/nest.toml` from string (or list of strings) fields, None left out, and the
    generics table."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in fields.items() if v is not None]
    lines += ["", "[generics]"]
    for name, value in generics.items():
        shown = str(value) if isinstance(value, int) else _toml_string(str(value))
        lines.append(f"{name} = {shown}")
    write_bytes(folder / CARD_NAME, ("\n".join(lines) + "\n").encode("utf-8"))


def _toml_value(value: str | list[str]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_string(v) for v in value) + "]"
    return _toml_string(value)


def readme_license(text: str) -> str | None:
    """The `license:` of a README's YAML front matter (a Hugging Face model card's
    `---` block at the top), or None."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for line in lines[1:]:
        if line.strip() == "---":
            return None
        key, sep, value = line.partition(":")
        if sep and key.strip() == "license" and value.strip():
            return value.strip().strip("'\"")
    return None


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def loader_arguments(
    source: Any,
    generics: Mapping[str, object] | None,
    weights: Any,
    root: str | None,
    bindings: Any,
) -> tuple[Any, Mapping[str, object] | None, Any, str | None, Any]:
    """A loader's `(source, generics, weights, root, bindings)` with a card filled in:
    the card gives whatever the caller left out, and the caller's generics override its own."""
    if not is_card(source):
        return source, generics, weights, root, bindings
    card = read_card(source)
    merged = {**card.generics, **(generics or {})}
    return (
        card.source,
        merged,
        card.weights if weights is None else weights,
        card.root if root is None else root,
        card.bindings if bindings is None and weights is None else bindings,
    )
