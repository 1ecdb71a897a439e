"""The one exception type users see.

Everything that is not a source diagnostic (a bad option, a checkpoint that does
not match, a file that cannot be written) is a `LinnetError` whose message names
the parameter path, operator, file or option at fault. When the error comes from
checking source, the diagnostics travel with it so callers can render them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from linnet.diagnostics import Diagnostic


class LinnetError(Exception):
    """A user-facing error: a clear message, never an internal traceback."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)

    def __str__(self) -> str:
        if not self.diagnostics:
            return self.message
        from linnet.diagnostics import render_human

        return self.message + "\n\n" + render_human(self.diagnostics, color=False)


class InternalError(Exception):
    """A bug in linnet itself; the CLI turns it into a short report request."""
