"""Comment placement for the formatter (language.md section 17, "Comments").

Stage: used by `syntax.format` while it turns the syntax tree into a layout
document. In: the source, its comments (`File.comments`) and the token stream
(re-scanned from the source). Out: document pieces that put every comment back
between the same two tokens it sat between in the source.

The formatter prints the tokens of a file in source order; only commas change
(trailing commas are added to broken lists and dropped from `where` clauses,
generic argument lists, tuple types and patterns) and the parentheses around a
type, which the tree does not keep (see `skip`). So every token the printer emits goes
through `CommentCursor.tok`, which advances a cursor over the source tokens and
emits the comments met on the way:

- a comment after code on the same line (`own_line` false) is printed right
  after the token before it, one space after the code. At the end of a line,
  after a token where the layout may break (an opening bracket or comma of a
  list, a binary operator, the end of a list element or statement) it becomes
  a line suffix that forces the enclosing group to break; after other tokens it
  ends the output line right there. Either way the comment ends up after the
  same token when the output is formatted again, so formatting is idempotent;
- a comment on its own line is printed before the next token, on its own line
  at the current indentation, with one blank line kept before or after it where
  the source had any (never right after an opening bracket or before a closing
  one).

Sequence printers (bodies, lists) call `leading` before an element and
`hold`/`release` around it, so the comments before the element and those
trailing its last token land outside the element's own groups: a comment after
`let x = f(a)` does not break `f(a)`.

With no comments in the file the cursor is inactive and `tok` just returns the
text, so formatting an AST built by hand (the importers do) needs no source.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from linnet.errors import InternalError
from linnet.source import SourceFile
from linnet.syntax.doc import (
    BLANKLINE,
    BREAK_PARENT,
    HARDLINE,
    SOFT_SPACE,
    Concat,
    DocLike,
    line_suffix,
)
from linnet.syntax.lexer import scan
from linnet.syntax.tokens import Comment

# States of the output line in `CommentCursor.leading`: it ends with code; with
# an own-line block comment (more comments can follow on it); with an own-line
# `//` comment; or it is ended (no comment that followed code can go there).
_CODE, _OPEN, _OWN_CLOSED, _CLOSED = range(4)
OPENERS = frozenset(("(", "[", "{", "<"))
CLOSERS = frozenset((")", "]", "}", ">"))
# Tokens a broken line ends with (binary operators, list commas): a comment at the
# end of the line before one of them moves after it.
_BREAK_AFTER = frozenset(
    (",", "||", "&&", "==", "!=", "<", "<=", ">", ">=", "|", "^", "&", "+", "-", "*", "/", "%")
)


def clean_comment(text: str) -> str:
    """A comment as the formatter prints it: each line without trailing blanks."""
    if "\n" not in text:
        return text.rstrip()
    return "\n".join(line.rstrip() for line in text.split("\n"))


class CommentCursor:
    """Walks the source tokens in step with the printer and places comments."""

    __slots__ = (
        "active",
        "comments",
        "continues",
        "ends",
        "eol",
        "flat_depth",
        "floating",
        "fresh",
        "held",
        "k",
        "next_comment",
        "starts",
        "text",
        "texts",
    )

    def __init__(self, source: SourceFile, comments: Sequence[Comment]) -> None:
        self.active = bool(comments)
        self.text = source.text
        self.comments = sorted(comments, key=lambda c: c.span.start)
        self.next_comment = 0
        self.k = 0  # index of the next source token to print
        self.held: set[int] = set()
        # Inside types, generic argument and index lists (which never break) a
        # trailing comment does not force a break: it just ends its line.
        self.flat_depth = 0
        # A comment printed as a line suffix at a break point waits for the
        # line break; no other comment may join it on that line (`tok_parts`).
        self.floating = False
        # Own-line comments were printed since the last token: the output is at
        # the start of a line, where a comment that followed code cannot go.
        self.fresh = False
        if self.active:
            scanned = scan(source)
            self.texts, self.starts, self.ends = scanned.texts, scanned.starts, scanned.ends
        else:
            self.texts, self.starts, self.ends = [], [], []
        self.eol, self.continues = self._end_of_line_flags()

    # ------------------------------------------------------------ tokens

    def tok(self, text: str, breaks: bool = False) -> DocLike:
        """The document for the next source token `text`, with its comments.

        `breaks` marks a token the layout may break right after (a list's
        opening bracket or comma, a binary operator): a comment ending the line
        after it forces the enclosing group to break there. After other tokens
        such a comment ends the output line itself."""
        if not self.active:
            return text
        before, after = self.tok_parts(text, breaks)
        if after == "":
            return before
        return Concat((before, after))

    def tok_parts(self, text: str, breaks: bool = False) -> tuple[DocLike, DocLike]:
        """Like `tok`, but the comments trailing the token come apart, so that a
        closing bracket's trailing comment can be placed outside its group."""
        if not self.active:
            return text, ""
        texts = self.texts
        k = self.k
        while texts[k] != text:
            if text == ",":  # a trailing comma the formatter adds
                return text, ""
            if texts[k] == ",":  # one it leaves out (`skip` keeps its comments)
                k += 1
                continue
            raise InternalError(
                f"formatter out of step with the source: printing `{text}` where the "
                f"source has `{texts[k]}` (offset {self.starts[k]})"
            )
        self.k = k
        before: DocLike
        if (
            breaks
            and not self.flat_depth
            and self._only_line_ends_before(self.starts[k])
            and not self.any_within(self.ends[k], self.starts[k + 1])
        ):
            # `a // c` then `+ b` on the next line: the comment ends the line
            # after the operator (or comma) instead, where the layout breaks.
            before = ""
        else:
            before = self.leading(self.starts[k], closer=text in CLOSERS)
        self.k = k + 1
        self.fresh = False
        doc: DocLike = text if before == "" else Concat((before, text))
        if self.ends[k] in self.held:
            if text != ",":
                self.floating = False
            return doc, ""
        # A line comment waiting for its newline (after a list element, say)
        # is flushed once a token other than a comma is printed: a line break
        # came first. A comma may still be on that line; if the comma has a
        # comment of its own, the comma moves to the next line.
        pending = self.floating and text == ","
        self.floating = False
        after = self._trailing(breaks)
        if pending:
            if after != "":
                doc = Concat((HARDLINE, doc))
            else:
                self.floating = True
        return doc, after

    def skip(self, text: str) -> DocLike:
        """Leave out the next source token if it is `text` (a trailing comma the
        layout drops, a parenthesis around a type). Comments on its own lines
        before it are printed here; those after code stay pending and follow
        the last token printed, as they will once the output is reformatted."""
        if not self.active or self.texts[self.k] != text:
            return ""
        limit = self.starts[self.k]
        before: DocLike = ""
        if not self._only_line_ends_before(limit):
            before = self.leading(limit, closer=self.texts[self.k + 1] in CLOSERS)
        self.k += 1
        return before

    def colons(self) -> DocLike:
        """`::` in a slice, written in the source as one `::` token or as `: :`."""
        if self.active and self.texts[self.k] == ":":
            return Concat((self.tok(":"), self.tok(":")))
        return self.tok("::")

    # ------------------------------------------------------------ comments

    def leading(self, limit: int, closer: bool = False) -> DocLike:
        """Every comment not yet printed that starts before offset `limit`
        (the next token), except one that followed code which the layout left
        out and that would now start a line: it follows the next token."""
        comments = self.comments
        i = self.next_comment
        if not self.active or i >= len(comments) or comments[i].span.start >= limit:
            return ""
        parts: list[DocLike] = []
        after_opener = self.k == 0 or self.texts[self.k - 1] in OPENERS
        # What the current output line ends with: code, an own-line block
        # comment (more comments may follow on the line), or nothing usable.
        line = _CLOSED if self.fresh else _CODE
        own_line_seen = False
        while i < len(comments) and comments[i].span.start < limit:
            comment = comments[i]
            text = clean_comment(comment.text)
            if comment.own_line:
                self.floating = False
                at_start = after_opener and not own_line_seen
                blank = not at_start and self.blank_before(comment.span.start)
                parts.extend((BLANKLINE if blank else HARDLINE, text))
                own_line_seen = True
                line = _OWN_CLOSED if text.startswith("//") else _OPEN
            elif line in (_CLOSED, _OWN_CLOSED):
                break
            elif line == _OPEN:
                parts.append(" " + text)
                line = _OWN_CLOSED if text.startswith("//") else _OPEN
            else:
                after_code = self._after_code(i, text, False)
                parts.extend(after_code)
                if after_code[-1] is HARDLINE:
                    line = _CLOSED
            i += 1
        self.next_comment = i
        if line in (_OPEN, _OWN_CLOSED):
            # The token goes on the next line, after a blank one if the source
            # had it (but never right before a closing bracket).
            blank = not closer and limit < len(self.text) and self.blank_before(limit)
            parts.append(BLANKLINE if blank else HARDLINE)
        if line != _CODE:
            self.fresh = True
        return Concat(tuple(parts))

    def before_closer(self) -> DocLike:
        """The comments before the next source token, a closing bracket: called
        inside the container's indentation so they line up with its contents."""
        if not self.active:
            return ""
        return self.leading(self.starts[self.k], closer=True)

    def rest(self) -> DocLike:
        """Every comment not printed yet (those after the last token)."""
        if not self.active:
            return ""
        return self.leading(len(self.text) + 1, closer=True)

    def hold(self, end: int) -> int | None:
        """Keep the comments after the token ending at `end` for `release`."""
        if not self.active or end in self.held:
            return None
        self.held.add(end)
        return end

    def flush(self) -> DocLike:
        """Comments after code still waiting (they followed a token the layout
        left out): printed now, before the printer starts a new line, so that
        they stay after code."""
        if not self.active or self.fresh:
            return ""
        return self._trailing(False, defer=False)

    def newline(self) -> None:
        """The printer starts a new line here (between statements, say)."""
        self.floating = False

    def release(self, held: int | None, breaks: bool = True) -> DocLike:
        """The comments trailing the held token, printed after the whole element.
        `breaks`: the layout may break the line right after the element (the
        next token is a list comma, or a line break comes first)."""
        if held is None:
            return ""
        self.held.discard(held)
        if self.k == 0 or self.ends[self.k - 1] != held:
            return ""
        return self._trailing(breaks)

    def any_within(self, start: int, end: int) -> bool:
        """Whether a comment starts inside `[start, end)` (a body or list that
        holds only comments is not printed as empty `{}`)."""
        if not self.active:
            return False
        comments = self.comments
        i = bisect.bisect_left(comments, start, key=lambda c: c.span.start)
        return i < len(comments) and comments[i].span.start < end

    def blank_before(self, offset: int) -> bool:
        """Whether an empty line precedes `offset` in the source (only blanks and
        at least two line breaks between it and the text before)."""
        text = self.text
        newlines = 0
        i = min(offset, len(text)) - 1
        while i >= 0:
            ch = text[i]
            if ch == "\n":
                newlines += 1
                if newlines == 2:
                    return True
            elif ch not in " \t\r":
                return False
            i -= 1
        return False

    # ------------------------------------------------------------ helpers

    def _trailing(self, breaks: bool, defer: bool = True) -> DocLike:
        """Comments after the token just printed and on the same line as code."""
        comments = self.comments
        i = self.next_comment
        limit = self.starts[self.k] if self.k < len(self.starts) else len(self.text) + 1
        if (
            defer
            and not breaks
            and self.texts[self.k] in _BREAK_AFTER
            and self._only_line_ends_before(limit)
        ):
            return ""  # `a // c` then `+ b`: the comment follows the operator
        parts: list[DocLike] = []
        while i < len(comments) and comments[i].span.start < limit and not comments[i].own_line:
            parts.extend(self._after_code(i, clean_comment(comments[i].text), breaks))
            i += 1
        self.next_comment = i
        return Concat(tuple(parts)) if parts else ""

    def _only_line_ends_before(self, limit: int) -> bool:
        """Whether comments wait before offset `limit`, all of them at the end
        of a line after code."""
        comments = self.comments
        i = self.next_comment
        if i >= len(comments) or comments[i].span.start >= limit:
            return False
        while i < len(comments) and comments[i].span.start < limit:
            if comments[i].own_line or not self.eol[i]:
                return False
            i += 1
        return True

    def _after_code(self, index: int, text: str, breaks: bool) -> list[DocLike]:
        """A comment after code. Inline (code follows it on its line): kept in
        place. At the end of its line: a line suffix, which at a break point
        forces the enclosing group to break (the line ends right there); after
        other tokens a line comment ends the output line itself, so it can
        neither move nor have code or another comment joined after it."""
        spaced = " " + text
        if not self.eol[index]:
            if self.floating:  # keep the order of the comments
                return [line_suffix(spaced)]
            return [spaced, SOFT_SPACE]
        if self.continues[index]:  # the line goes on with another comment
            return [line_suffix(spaced)]
        if breaks and not self.flat_depth:
            self.floating = True
            return [line_suffix(spaced), BREAK_PARENT]
        self.floating = False
        return [line_suffix(spaced), HARDLINE]

    def _end_of_line_flags(self) -> tuple[list[bool], list[bool]]:
        """For each comment: is it followed, on its line, by nothing but blanks
        and other such comments (`eol`)? Is the next comment on its line
        (`continues`)?"""
        text = self.text
        comments = self.comments
        eol = [False] * len(comments)
        continues = [False] * len(comments)
        for i in range(len(comments) - 1, -1, -1):
            pos = comments[i].span.end
            while pos < len(text) and text[pos] in " \t":
                pos += 1
            if pos >= len(text) or text[pos] in "\r\n":
                eol[i] = True
            elif i + 1 < len(comments) and comments[i + 1].span.start == pos:
                eol[i] = eol[i + 1]
                continues[i] = True
        return eol, continues
