"""The front end in order, one call per stage: the one place to read the whole flow.

    source text -> tokens -> syntax tree      syntax.parser.parse (lexes as it goes)
                -> module graph               check.modules.load_program / load_source
                -> checked program            check.checker.check_graph

Semantic checking runs only on a graph without lexing, parsing or loading
errors (language.md 1.3); the `CheckedProgram` then carries just those
diagnostics and empty side tables. Later stages (binding, Core IR, backends)
start from a `CheckedProgram` without errors.

Every heavy import is local to the function that needs it, so `linnet check`
loads neither NumPy nor any framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from linnet.check.modules import ModuleGraph
    from linnet.check.program import CheckedProgram


def check_paths(
    paths: Sequence[Path],
    std_root: Path | None = None,
    *,
    relative_to: Path | None = None,
) -> CheckedProgram:
    """Check files and directories (searched recursively for `*.linnet`, 18.2).

    `relative_to` makes diagnostics name files relative to that directory (the
    conformance harness uses it). Unreadable or missing paths raise `LinnetError`.
    """
    from linnet.check.modules import load_program

    # 1. read, lex and parse every named file and every module it imports (sections 2-4)
    graph = load_program(paths, std_root, relative_to=relative_to)
    # 2. names, types, shapes and proofs (sections 5-15), only for an error-free graph
    return check_loaded(graph)


def check_source(
    text: str,
    path: str = "<input>",
    std_root: Path | None = None,
) -> CheckedProgram:
    """Check in-memory text as the root module (tests, editors, fuzzing)."""
    from linnet.check.modules import load_source

    # 1. lex and parse the text, then load what it imports (sections 2-4)
    graph = load_source(text, path, std_root)
    # 2. semantic checking (sections 5-15)
    return check_loaded(graph)


def check_loaded(graph: ModuleGraph) -> CheckedProgram:
    """Run the checker on a loaded graph, or stop at its loading errors (1.3)."""
    if graph.has_errors:
        from linnet.check.program import CheckedProgram
        from linnet.diagnostics import sort_key

        return CheckedProgram(graph, sorted(graph.diagnostics, key=sort_key))
    from linnet.check.checker import check_graph

    return check_graph(graph)
