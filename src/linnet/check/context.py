"""Shared state of one checking run: diagnostics, side tables, module records.

Stage: created by `check.checker.check_graph`, passed to every part of the
checker. Keeping the state here (instead of in module globals) keeps checking
a pure function of the module graph.
"""

from __future__ import annotations

from linnet.check.decls import ModuleInfo
from linnet.check.program import CheckedProgram
from linnet.diagnostics import Diagnostic, Label
from linnet.source import Span


class Context:
    """Diagnostics sink plus the program being filled."""

    __slots__ = ("diags", "modules", "program", "unknown_names")

    def __init__(self, program: CheckedProgram) -> None:
        self.program = program
        self.diags: list[Diagnostic] = []
        self.modules: dict[str, ModuleInfo] = program.modules
        # (module key, spelling) -> index in `diags` of its one E1201 (check.unknown).
        self.unknown_names: dict[tuple[str, str], int] = {}

    def error(
        self,
        code: str,
        message: str,
        span: Span | None,
        label: str = "",
        *,
        related: tuple[Label, ...] = (),
        notes: tuple[str, ...] = (),
        help: tuple[str, ...] = (),
    ) -> None:
        self.diags.append(Diagnostic(code, message, span, label, related, notes, help))

    def warn(
        self,
        code: str,
        message: str,
        span: Span | None,
        label: str = "",
        *,
        help: tuple[str, ...] = (),
    ) -> None:
        self.diags.append(Diagnostic(code, message, span, label, (), (), help))
