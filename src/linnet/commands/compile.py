"""`linnet inspect --ir` and `linnet torch`: one entry compiled with every generic bound (18.3).

Both check the file first (a program with errors prints its diagnostics and
exits 1), then run bind -> lower -> optimize (`linnet.pipeline.compile_entry`)
for the chosen root and entry. `inspect --ir` prints the Core IR text of
`linnet.ir.printer`; `torch` prints the Python source that `linnet.torch`'s
code generator builds for it, as a module that runs on its own
(`linnet.torch.standalone`; torch is imported only by that command).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.diagnostics import render_human
from linnet.errors import LinnetError

if TYPE_CHECKING:
    from linnet.ir.core import Function
    from linnet.pipeline import Compiled
    from linnet.target import Target


def show_ir(path: Path, target: Target, optimize: bool, color: bool) -> int:
    """Print the Core IR of the target entry; exit status 1 on errors in the source."""
    from linnet.ir.printer import print_function

    compiled = compile_target(path, target, optimize, color)
    if compiled is None:
        return 1
    sys.stdout.write(print_function(compiled.function))
    return 0


def differentiated(compiled: Compiled) -> tuple[Function, list[str]]:
    """`--grad`: the entry's loss and gradients (`linnet.ir.grad`), and what each is of."""
    from linnet.ir.grad import differentiate_entry
    from linnet.pipeline import optimize

    r = compiled.resolved
    fn, names = differentiate_entry(compiled.function, r.model, r.present)
    return optimize(fn), names


def gradients_line(names: list[str]) -> str:
    """The `GRADIENTS = [...]` line generated Python defines (language-extensions 6.2)."""
    return f"GRADIENTS = {names!r}  # what each result after the loss is the gradient of\n"


def show_torch(path: Path, target: Target, color: bool, grad: bool = False) -> int:
    """Print the PyTorch source generated for the target entry (weights hoisted)."""
    compiled = compile_target(path, target, True, color)
    if compiled is None:
        return 1
    try:
        import torch
    except ImportError:
        raise LinnetError(
            "`linnet torch` needs PyTorch: install it with `pip install 'linnet-lang[torch]'`"
        ) from None
    from linnet.torch.codegen import generate
    from linnet.torch.standalone import standalone_source

    # The meta device: constants and iotas the source refers to are never
    # allocated (H = 2**40 prints as it would for H = 8, not a terabyte of arange);
    # the standalone module spells constants from the IR, not from tensors.
    fn, names = differentiated(compiled) if grad else (compiled.function, None)
    generated = generate(fn, torch.device("meta"), hoist_weights=True)
    title = f"entry `{compiled.function.name}` of {path.name}"
    sys.stdout.write(standalone_source(generated, title))
    if names is not None:
        sys.stdout.write("\n" + gradients_line(names))
    return 0


def compile_target(path: Path, target: Target, optimize: bool, color: bool) -> Compiled | None:
    """The target entry compiled, or None after printing the file's errors."""
    from linnet.pipeline import check_paths, compile_entry

    program = check_paths([path], target.std)
    if program.has_errors:
        sys.stderr.write(render_human(program.diagnostics, color=color))
        return None
    return compile_entry(program, target, optimized=optimize)
