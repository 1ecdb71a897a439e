"""`linnet onnx`: one entry as an ONNX model, printed in the ONNX text form (language.md 18.3).

The file is checked first (a program with errors prints its diagnostics and
exits 1), then compiled with every generic bound (`linnet.pipeline.compile_entry`,
as `inspect --ir` does) and exported without weights: params are graph
inputs `param<N>`, bound by name at run time (`linnet.onnx.export.assemble`
has the graph contract). The text is what `onnx.parser.parse_model` reads.
`--output FILE` writes the binary model instead; `--provider` chooses the
ONNX Runtime provider the dtype choices are made for, `--fused` allows
ONNX Runtime's contrib kernels, `--dynamic B,S` leaves those entry generics
symbolic (`export_model(dynamic=...)`: no `--bind` needed for them), `--grad`
exports the loss and its gradients (language-extensions 6: outputs `loss`,
`grad<N>`). onnx is imported only by this command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from linnet.diagnostics import render_human
from linnet.errors import LinnetError

if TYPE_CHECKING:
    from linnet.target import Target


def show_onnx(
    path: Path,
    target: Target,
    color: bool,
    *,
    provider: str = "cpu",
    fused: bool = False,
    output: Path | None = None,
    grad: bool = False,
    dynamic: tuple[str, ...] = (),
) -> int:
    """Print (or write) the ONNX model of the target entry; exit status 1 on source errors."""
    from linnet.pipeline import check_paths, compile_entry

    try:
        from linnet.onnx.export.assemble import export_ir
    except ImportError:
        raise LinnetError(
            "`linnet onnx` needs the onnx package: install it with `pip install 'linnet-lang[onnx]'`"
        ) from None
    program = check_paths([path], target.std)
    if program.has_errors:
        sys.stderr.write(render_human(program.diagnostics, color=color))
        return 1
    if dynamic:
        from linnet.onnx.export.api import export_model

        exported = export_model(
            program,
            generics=target.generics,
            entry=target.entry,
            root=target.root,
            provider=provider,
            fused=fused,
            dynamic=dynamic,
            optionals=target.optionals_present,
            grad=grad,
        )
    else:
        compiled = compile_entry(program, target)
        fn, gradients = compiled.function, None
        if grad:
            from linnet.ir.grad import differentiate_entry
            from linnet.pipeline import optimize

            r = compiled.resolved
            fn, gradients = differentiate_entry(fn, r.model, r.present)
            fn = optimize(fn)
        exported = export_ir(fn, provider=provider, fused=fused, gradients=gradients)
    if output is not None:
        exported.save(output)
        return 0
    sys.stdout.write(exported.text())
    return 0
