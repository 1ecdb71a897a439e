"""`linnet plan`: the plan JSON of a file's root block on stdout (language.md 18.2, 19).

The file is checked with its imports first; a program with errors prints its
diagnostics on stderr (16.3) and exits 1 without a document. The plan needs
no tensor data and no NumPy: it is built from the checked program alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from linnet.diagnostics import render_human


def show_plan(
    path: Path,
    std_root: Path | None,
    root: str | None,
    numerics: str,
    optimize: bool,
    color: bool,
) -> int:
    """Print the plan of `path`; exit status 1 when the program has errors."""
    from linnet.pipeline import check_paths
    from linnet.plan import build_plan, plan_json

    program = check_paths([path], std_root)
    if program.has_errors:
        sys.stderr.write(render_human(program.diagnostics, color=color))
        return 1
    plan = build_plan(program, root, numerics=numerics, optimize=optimize)
    sys.stdout.write(plan_json(plan))
    return 0
