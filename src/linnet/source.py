"""Source files and spans.

A `SourceFile` holds the decoded text of one `.linnet` file. Spans are offsets
into that text counted in characters (code points), which is what the lexer
walks; `SourceFile` converts them to 1-based line/column (columns count code
points, as section 16.3 asks) and to the byte offsets the JSON output reports.

Invalid UTF-8 is decoded with `surrogateescape`, so every input byte maps to one
character and the lexer can point at the bad byte (E1001) instead of failing.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from linnet.records import field, record


class SourceFile:
    """One file's text plus the indexes needed to turn offsets into positions."""

    __slots__ = ("_byte_prefix", "_line_starts", "path", "text")

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        starts = [0]
        find = text.find
        i = find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = find("\n", i + 1)
        self._line_starts = starts
        self._byte_prefix: list[int] | None = None

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> SourceFile:
        """Decode file bytes; a leading UTF-8 byte-order mark is dropped (2.1)."""
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        return cls(path, data.decode("utf-8", "surrogateescape"))

    @classmethod
    def read(cls, path: str | Path) -> SourceFile:
        return cls.from_bytes(str(path), Path(path).read_bytes())

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column (in code points) of a character offset."""
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its line ending."""
        start = self._line_starts[line - 1]
        end = self._line_starts[line] - 1 if line < len(self._line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r")

    @property
    def line_count(self) -> int:
        return len(self._line_starts)

    def byte_offset(self, offset: int) -> int:
        """The UTF-8 byte offset of a character offset (what JSON output reports)."""
        if self.text.isascii():
            return offset
        if self._byte_prefix is None:
            prefix = [0]
            total = 0
            for ch in self.text:
                total += len(ch.encode("utf-8", "surrogateescape"))
                prefix.append(total)
            self._byte_prefix = prefix
        return self._byte_prefix[min(offset, len(self._byte_prefix) - 1)]

    def __repr__(self) -> str:
        return f"SourceFile({self.path!r})"


@record(frozen=True)
class Span:
    """A half-open character range `[start, end)` in one source file."""

    file: SourceFile = field(compare=False, repr=False)
    start: int
    end: int

    def to(self, other: Span) -> Span:
        """The span from the start of this one to the end of `other`."""
        return Span(self.file, self.start, max(self.end, other.end))

    @property
    def text(self) -> str:
        return self.file.text[self.start : self.end]
