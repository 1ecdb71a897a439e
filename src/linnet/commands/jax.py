"""`linnet jax` and `linnet stablehlo`: one entry as `jax.numpy` source or StableHLO text (18.3).

Both check the file first (a program with errors prints its diagnostics and
exits 1), then compile the entry with every generic bound
(`linnet.pipeline.compile_entry`, as `inspect --ir` and `torch` do). `jax`
prints the source `linnet.jax.load_source` runs; `stablehlo` prints the MLIR
module `linnet.jax.load` compiles on XLA, with static shapes and the
calling contract in its `linnet.*` attributes (`linnet.jax.stablehlo.export`).
jax is imported only by these commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.errors import LinnetError

if TYPE_CHECKING:
    from linnet.ir.core import Function
    from linnet.target import Target


def _function(
    path: Path, target: Target, color: bool, command: str, grad: bool = False
) -> tuple[Function, list[str] | None] | None:
    from linnet.commands.compile import compile_target, differentiated

    try:
        import jax  # noqa: F401
    except ImportError:
        raise LinnetError(
            f"`linnet {command}` needs JAX: install it with `pip install 'linnet-lang[jax]'`"
        ) from None
    compiled = compile_target(path, target, True, color)
    if compiled is None:
        return None
    return differentiated(compiled) if grad else (compiled.function, None)


def show_jax(path: Path, target: Target, color: bool, grad: bool = False) -> int:
    """Print the `jax.numpy` source generated for the target entry."""
    found = _function(path, target, color, "jax", grad)
    if found is None:
        return 1
    from linnet.commands.compile import gradients_line
    from linnet.jax.codegen import generate

    fn, names = found
    sys.stdout.write(generate(fn).source)
    if names is not None:
        sys.stdout.write("\n" + gradients_line(names))
    return 0


def show_stablehlo(path: Path, target: Target, color: bool, grad: bool = False) -> int:
    """Print the StableHLO text of the target entry."""
    found = _function(path, target, color, "stablehlo", grad)
    if found is None:
        return 1
    from linnet.jax.stablehlo import export_stablehlo

    fn, names = found
    sys.stdout.write(export_stablehlo(fn, gradients=names).text)
    return 0
