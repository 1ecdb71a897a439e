"""The layout engine of `linnet fmt`: a Wadler/Prettier-style group printer.

Stage: used by `syntax.format` only. In: a document tree built from the syntax
tree (text, groups, indentation, line breaks, line suffixes). Out: the final
text, following language.md section 17 "Layout engine": width 100, indent 4,
a group printed on one line if it fits in the remaining width, otherwise its
break points become newlines, nested groups deciding independently. Lines never
end in whitespace and every line ending is LF.

The algorithm is Prettier's `printDocToString`: an explicit command stack (no
recursion, so deeply nested expressions cannot overflow Python's stack) and a
`fits` check that measures a group flat plus whatever follows it up to the next
possible line break. Besides the usual `line`/`softline`/`hardline` there is
`BLANKLINE`: make sure one empty line precedes what follows (several in a row
collapse to one). No line break ends a line that is still empty, so blank lines
come from `BLANKLINE` alone.

>>> render(group("f(", indent(SOFTLINE, "a,", LINE, "b"), SOFTLINE, ")"))
'f(a, b)\\n'
>>> render(group("f(", indent(SOFTLINE, "a,", LINE, "b"), SOFTLINE, ")"), width=4)
'f(\\n    a,\\n    b\\n)\\n'
"""

from __future__ import annotations

from typing import Final

WIDTH: Final = 100
INDENT: Final = 4


class Doc:
    """A document node. `hard` is true when it contains a forced line break,
    which forces every enclosing group to break (Prettier's break propagation)."""

    __slots__ = ("hard",)

    def __init__(self, hard: bool) -> None:
        self.hard = hard


DocLike = Doc | str


def _is_hard(d: DocLike) -> bool:
    if isinstance(d, str):
        return "\n" in d
    return d.hard


class Concat(Doc):
    __slots__ = ("parts",)

    def __init__(self, parts: tuple[DocLike, ...]) -> None:
        hard = False
        for p in parts:  # an explicit loop: this is the hottest constructor
            if isinstance(p, str):
                if "\n" in p:
                    hard = True
                    break
            elif p.hard:
                hard = True
                break
        self.hard = hard
        self.parts = parts


class Group(Doc):
    """Printed flat when it fits, otherwise broken; `broken` forces the latter."""

    __slots__ = ("broken", "contents")

    def __init__(self, contents: DocLike, broken: bool) -> None:
        broken = broken or _is_hard(contents)
        super().__init__(broken)
        self.contents = contents
        self.broken = broken


class Indent(Doc):
    __slots__ = ("contents",)

    def __init__(self, contents: DocLike) -> None:
        super().__init__(_is_hard(contents))
        self.contents = contents


class Flat(Doc):
    """Contents printed flat whatever the width: types, generic argument lists and
    index lists never break (section 17). Forced breaks inside still happen."""

    __slots__ = ("contents",)

    def __init__(self, contents: DocLike) -> None:
        super().__init__(_is_hard(contents))
        self.contents = contents


class IfBreak(Doc):
    """`broken` when the enclosing group is broken, else `flat` (trailing commas)."""

    __slots__ = ("broken", "flat")

    def __init__(self, broken: DocLike, flat: DocLike) -> None:
        super().__init__(_is_hard(broken) or _is_hard(flat))
        self.broken = broken
        self.flat = flat


class LineSuffix(Doc):
    """Printed just before the next newline: a trailing comment stays at the end
    of its line even when punctuation (`,`, `)`) is printed after it."""

    __slots__ = ("contents",)

    def __init__(self, contents: DocLike) -> None:
        super().__init__(False)
        self.contents = contents


class BreakParent(Doc):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(True)


class SoftSpace(Doc):
    """A space before the next text on the same line, unless that text starts
    with a space or closing punctuation (used after inline block comments)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(False)


# Line kinds.
_LINE, _SOFT, _HARD, _BLANK = range(4)


class Line(Doc):
    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        super().__init__(kind >= _HARD)
        self.kind = kind


LINE: Final = Line(_LINE)  # a space when flat, a newline when broken
SOFTLINE: Final = Line(_SOFT)  # nothing when flat, a newline when broken
HARDLINE: Final = Line(_HARD)  # a newline in any mode
BLANKLINE: Final = Line(_BLANK)  # end the line and leave one empty line (collapsing)
BREAK_PARENT: Final = BreakParent()
SOFT_SPACE: Final = SoftSpace()


def concat(*parts: DocLike) -> Concat:
    return Concat(parts)


def group(*parts: DocLike, broken: bool = False) -> Group:
    return Group(parts[0] if len(parts) == 1 else Concat(parts), broken)


def indent(*parts: DocLike) -> Indent:
    return Indent(parts[0] if len(parts) == 1 else Concat(parts))


def flat(*parts: DocLike) -> Flat:
    return Flat(parts[0] if len(parts) == 1 else Concat(parts))


def if_break(broken: DocLike, flat_doc: DocLike = "") -> IfBreak:
    return IfBreak(broken, flat_doc)


def line_suffix(contents: DocLike) -> LineSuffix:
    return LineSuffix(contents)


def join(separator: DocLike, docs: list[DocLike]) -> Concat:
    parts: list[DocLike] = []
    for i, d in enumerate(docs):
        if i:
            parts.append(separator)
        parts.append(d)
    return Concat(tuple(parts))


# ---------------------------------------------------------------- printing

_BREAK, _FLAT = 0, 1
_Cmd = tuple[int, int, DocLike]  # indentation, mode, document


def _fits(first: _Cmd, rest: list[_Cmd], remaining: int) -> bool:
    """Whether `first` printed flat, plus what follows it up to the next line
    break the rest can take, fits in `remaining` columns."""
    cmds: list[_Cmd] = [first]
    rest_index = len(rest)
    while remaining >= 0:
        if not cmds:
            if rest_index == 0:
                return True
            rest_index -= 1
            cmds.append(rest[rest_index])
            continue
        ind, mode, d = cmds.pop()
        if type(d) is str:
            newline = d.find("\n")
            if newline >= 0:
                return remaining - newline >= 0
            remaining -= len(d)
        elif type(d) is Concat:
            cmds.extend([(ind, mode, part) for part in reversed(d.parts)])
        elif type(d) is Line:
            kind = d.kind
            if mode == _BREAK or kind >= _HARD:
                return True
            if kind == _LINE:
                remaining -= 1
        elif type(d) is Group:
            cmds.append((ind, _BREAK if d.broken else mode, d.contents))
        elif type(d) is Indent:
            cmds.append((ind, mode, d.contents))
        elif type(d) is Flat:
            cmds.append((ind, _FLAT, d.contents))
        elif type(d) is IfBreak:
            cmds.append((ind, mode, d.broken if mode == _BREAK else d.flat))
        # LineSuffix, BreakParent and SoftSpace take no width.
    return False


_NO_SPACE_BEFORE: Final = frozenset(" ,;:.?)]}>")


class _Output:
    """Lines being written: indentation is written lazily with the first text of
    a line, so no line ever ends in whitespace."""

    __slots__ = ("at_line_start", "col", "cur", "lines", "pending_indent", "soft_space")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cur: list[str] = []
        self.col = 0
        self.at_line_start = True
        self.pending_indent = 0
        self.soft_space = False

    def text(self, s: str) -> None:
        if "\n" in s:
            first, *more = s.split("\n")
            self.text(first)
            for verbatim in more:  # block comment continuation lines, as written
                self.end_line()
                self.cur.append(verbatim)
                self.col = len(verbatim)
                self.at_line_start = False
            return
        if self.at_line_start:
            s = s.lstrip(" ")
            if not s:
                return
            self.cur.append(" " * self.pending_indent)
            self.col = self.pending_indent
            self.at_line_start = False
        elif s[0] == " " and self.cur[-1].endswith(" "):
            s = s[1:]  # one space between two pieces, never two
        elif self.soft_space and s[0] not in _NO_SPACE_BEFORE:
            s = " " + s
        self.soft_space = False
        self.cur.append(s)
        self.col += len(s)

    def end_line(self) -> None:
        self.lines.append("".join(self.cur).rstrip())
        self.cur = []
        self.col = 0
        self.at_line_start = True
        self.soft_space = False

    def newline(self, kind: int, ind: int) -> None:
        """End the current line. A line that is still empty is not ended again:
        blank lines come only from `BLANKLINE`, never from a break that follows
        a forced one (a comment ending its line, say)."""
        if not self.at_line_start:
            self.end_line()
        if kind == _BLANK and self.lines and self.lines[-1]:
            self.lines.append("")
        self.pending_indent = ind

    def finish(self) -> str:
        if not self.at_line_start:
            self.end_line()
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def render(doc: DocLike, width: int = WIDTH) -> str:
    """Lay `doc` out in `width` columns; the result ends with exactly one newline."""
    out = _Output()
    suffixes: list[_Cmd] = []
    stack: list[_Cmd] = [(0, _BREAK, doc)]
    push = stack.append
    while stack:
        ind, mode, d = stack.pop()
        if type(d) is str:
            if d:
                out.text(d)
        elif type(d) is Concat:
            stack.extend([(ind, mode, part) for part in reversed(d.parts)])
        elif type(d) is Line:
            kind = d.kind
            if mode == _FLAT and kind < _HARD:
                if kind == _LINE:
                    out.text(" ")
                continue
            if suffixes:
                push((ind, mode, d))
                stack.extend(reversed(suffixes))
                suffixes = []
                continue
            out.newline(kind, ind)
        elif type(d) is Group:
            contents = d.contents
            if d.broken:
                push((ind, _BREAK, contents))
            elif mode == _FLAT:
                push((ind, _FLAT, contents))
            else:
                cmd = (ind, _FLAT, contents)
                column = out.pending_indent if out.at_line_start else out.col
                push(cmd if _fits(cmd, stack, width - column) else (ind, _BREAK, contents))
        elif type(d) is Indent:
            push((ind + INDENT, mode, d.contents))
        elif type(d) is Flat:
            push((ind, _FLAT, d.contents))
        elif type(d) is IfBreak:
            push((ind, mode, d.broken if mode == _BREAK else d.flat))
        elif type(d) is LineSuffix:
            suffixes.append((ind, mode, d.contents))
        elif type(d) is SoftSpace:
            out.soft_space = not out.at_line_start
        if suffixes and not stack:
            stack.extend(reversed(suffixes))
            suffixes = []
    return out.finish()
