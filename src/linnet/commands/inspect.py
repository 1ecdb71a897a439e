"""`linnet inspect`: the parameter manifest of a file's blocks, or debugging dumps (18.2).

`--parameters` checks the file (and its imports) and prints, for every
top-level block declared in that file, the tensors a checkpoint must provide
(12.7). The text form is

    tiny::Mlp<H, Inner, Depth, Classes, T>
      param input.weight: Tensor[Inner, H; T]
      param input.bias: Tensor[Inner; T]?
      param hidden[*].weight: Tensor[Inner, Inner; T] x Depth

(one empty line between blocks); `--json` prints
`{"version": 1, "blocks": [...]}` with the fields of 18.2. `--tokens` and
`--ast` are debugging views without a stable format.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.diagnostics import Diagnostic, render_human
from linnet.errors import LinnetError
from linnet.source import SourceFile

if TYPE_CHECKING:
    from linnet.check.program import BlockManifest


def manifest_text(blocks: Sequence[BlockManifest]) -> str:
    """The text listing of 18.2; "" when the file declares no block."""
    parts = []
    for block in blocks:
        generics = f"<{', '.join(block.generics)}>" if block.generics else ""
        lines = [f"{block.module}::{block.name}{generics}"]
        for entry in block.entries:
            line = f"  {entry.kind} {entry.path}: Tensor[{', '.join(entry.shape)}; {entry.dtype}]"
            if entry.optional:
                line += "?"
            line += "".join(f" x {length}" for length in entry.repeat)
            lines.append(line)
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def manifest_json(blocks: Sequence[BlockManifest]) -> str:
    """The JSON document of 18.2 (indented, without a final newline)."""
    import json

    document = {
        "version": 1,
        "blocks": [
            {
                "name": block.name,
                "module": block.module,
                "generics": list(block.generics),
                "entries": [
                    {
                        "path": entry.path,
                        "kind": entry.kind,
                        "dtype": entry.dtype,
                        "shape": list(entry.shape),
                        "repeat": list(entry.repeat),
                        "optional": entry.optional,
                    }
                    for entry in block.entries
                ],
            }
            for block in blocks
        ],
    }
    return json.dumps(document, indent=2)


def show_parameters(path: Path, std_root: Path | None, as_json: bool, color: bool) -> int:
    """Check `path` and print the manifests of its blocks; exit status 1 on errors."""
    from linnet.pipeline import check_paths

    program = check_paths([path], std_root)
    if program.has_errors:
        sys.stderr.write(render_human(program.diagnostics, color=color))
        return 1
    blocks = program.manifest(program.graph.roots[0])
    sys.stdout.write(manifest_json(blocks) + "\n" if as_json else manifest_text(blocks))
    return 0


def show_tokens(path: Path, color: bool) -> int:
    """Every token of the file, then its lexical errors (exit 1 if any)."""
    from linnet.syntax.lexer import dump_tokens, lex

    tokens, _comments, diagnostics = lex(_read(path))
    sys.stdout.write(dump_tokens(tokens))
    return _report(diagnostics, color)


def show_ast(path: Path, color: bool) -> int:
    """The syntax tree of the file, then its syntax errors (exit 1 if any)."""
    from linnet.syntax.parser import dump_ast, parse

    tree, diagnostics = parse(_read(path))
    if tree is not None:
        sys.stdout.write(dump_ast(tree))
    return _report(diagnostics, color)


def _report(diagnostics: Sequence[Diagnostic], color: bool) -> int:
    if diagnostics:
        sys.stderr.write(render_human(diagnostics, color=color))
    return 1 if any(d.is_error for d in diagnostics) else 0


def _read(path: Path) -> SourceFile:
    try:
        return SourceFile.read(path)
    except OSError as exc:
        raise LinnetError(f"cannot read `{path}`: {exc.strerror or exc}") from None
