"""Parsing (language.md section 3): source text in, a syntax tree plus diagnostics out.

`parse` lexes and parses one file. It never raises: every lexical and syntax
error becomes a diagnostic (E1001-E1005, E1101-E1103) and the parser recovers at
the next statement or item, so all errors of a file are reported at once. The
tree it returns is complete for valid files; for files with errors it holds
whatever parsed, which is enough for tools that want partial results (the
formatter refuses such files, and semantic checking skips them, section 1.3).

The grammar is split over three modules: `parser_base` (cursor, errors,
recovery), `parser_expr` (expressions, types, patterns) and `parser_decl`
(statements, items, files).

>>> tree, diagnostics = parse_text("module demo\\nconst N = 4\\n")
>>> tree.module_name, len(tree.items), diagnostics
('demo', 1, [])
"""

from __future__ import annotations

import gc
import sys

from linnet.diagnostics import Diagnostic, sort_key
from linnet.source import SourceFile, Span
from linnet.syntax import ast
from linnet.syntax.lexer import scan
from linnet.syntax.parser_base import MAX_DEPTH
from linnet.syntax.parser_decl import DeclParser
from linnet.syntax.tokens import Comment

# Stack budget for MAX_DEPTH nesting levels: the worst constructs measured need
# about 2000 frames at the limit (up to ~8 frames per level); this is twice that.
_FRAMES_NEEDED = MAX_DEPTH * 12 + 1000


def parse(source: SourceFile) -> tuple[ast.File | None, list[Diagnostic]]:
    """Lex and parse `source`; diagnostics come sorted by position (16.5).

    The tree is returned even when there are errors; it is None only if the
    parser could build nothing at all, which the current grammar never needs.
    """
    # NOTE: a parse allocates ~1 object per token and no reference cycles, so the
    # cyclic collector would only rescan the growing tree (it halves throughput).
    collecting = gc.isenabled()
    gc.disable()
    limit = sys.getrecursionlimit()
    if limit < _FRAMES_NEEDED:
        sys.setrecursionlimit(_FRAMES_NEEDED)
    try:
        tokens = scan(source)
        parser = DeclParser(tokens)
        tree = parser.parse_file()
        parser_diagnostics = parser.diagnostics
    finally:
        if limit < _FRAMES_NEEDED:
            sys.setrecursionlimit(limit)
        if collecting:
            gc.enable()
    diagnostics = tokens.diagnostics + parser_diagnostics
    diagnostics.sort(key=sort_key)
    return tree, diagnostics


def parse_text(text: str, path: str = "<input>") -> tuple[ast.File | None, list[Diagnostic]]:
    """`parse` for in-memory text (tests, tools)."""
    return parse(SourceFile(path, text))


def dump_ast(tree: ast.File) -> str:
    """An indented, one-node-per-line view of a tree (`linnet inspect --ast`).

    Each line shows the node type, its plain fields (names, operators, literal
    spellings, flags) and its position as `line:col-line:col`; child nodes
    follow, indented, prefixed by the field that holds them. Comments are
    listed at the end.
    """
    lines: list[str] = []
    stack: list[tuple[object, int, str]] = [(tree, 0, "")]
    while stack:
        node, indent, label = stack.pop()
        scalars: list[str] = []
        children: list[tuple[object, str]] = []
        for field_name in ast.node_fields(node):
            value = getattr(node, field_name)
            if isinstance(value, Span) or value is None or field_name == "comments":
                continue
            if isinstance(value, ast.Ident):
                scalars.append(f"{field_name}={value.name}")
            elif isinstance(value, tuple):
                if value and all(isinstance(v, ast.Ident) for v in value):
                    scalars.append(f"{field_name}={'.'.join(v.name for v in value)}")
                else:
                    children.extend((v, f"{field_name}[{i}]") for i, v in enumerate(value))
            elif ast.is_node(value):
                children.append((value, field_name))
            else:
                scalars.append(f"{field_name}={value!r}")
        span = getattr(node, "span", None)
        where = f" @{_position(span)}" if isinstance(span, Span) else ""
        head = f"{label}: " if label else ""
        text = " ".join([type(node).__name__, *scalars])
        lines.append(f"{'  ' * indent}{head}{text}{where}")
        stack.extend((child, indent + 1, name) for child, name in reversed(children))
    for comment in tree.comments:
        lines.append(
            f"comment @{_position(comment.span)} own_line={comment.own_line} {comment.text!r}"
        )
    return "\n".join(lines) + "\n"


def _position(span: Span) -> str:
    line, col = span.file.line_col(span.start)
    end_line, end_col = span.file.line_col(span.end)
    return f"{line}:{col}-{end_line}:{end_col}"


__all__ = ["Comment", "dump_ast", "parse", "parse_text"]
