"""The parser's machinery: token cursor, syntax errors, recovery, speculation.

Shared by the expression/type parser (`parser_expr`) and the statement and
declaration parser (`parser_decl`). Nothing here knows the grammar beyond which
keywords start statements and items (used to resynchronise, section 3.4).

Tokens come from `lexer.scan` as parallel lists. The parser mostly compares
token *texts*: punctuation and keywords are identified by their text alone,
because no identifier, number or string token can spell one.

Errors: `report` records a diagnostic unless the token position already has one
(section 3.4: at most one syntax error per position) and parsing continues;
`fail` also unwinds to the nearest recovery point (a statement or item loop),
which skips to the start of the next statement or item. While speculating
(generic call vs comparison, type vs expression, section 3.3), any error
unwinds the speculation instead and nothing is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from linnet.diagnostics import Diagnostic, error
from linnet.source import Span
from linnet.spelling import did_you_mean
from linnet.syntax import ast
from linnet.syntax.lexer import EOF, FLOAT, IDENT, INT, KEYWORD, RESERVED_WORD, STRING, Scan
from linnet.syntax.tokens import WRITE_WORDS

T = TypeVar("T")

# Section 3.4: nesting deeper than this (brackets, operator chains) is E1101.
MAX_DEPTH = 256
# An expression spanning more tokens than this gets its tree height measured; a
# shorter one cannot be taller than the limit (every level consumes a token).
_HEIGHT_CHECK_TOKENS = MAX_DEPTH // 2

STATEMENT_KEYWORDS = frozenset({"let", "var", "return", "static", "while", "for", "yield"})
ITEM_KEYWORDS = frozenset(
    {"pub", "const", "type", "struct", "enum", "fn", "op", "entry", "block", "use", "extern"}
    | {"kernel"}
)
MEMBER_KEYWORDS = frozenset({"param", "buffer", "state", "sub"})
# Keywords that never stand for a mistyped name: they start a statement, an item or
# a member, so a name parser seeing one stops instead of consuming it.
STRUCTURAL_KEYWORDS = STATEMENT_KEYWORDS | ITEM_KEYWORDS | MEMBER_KEYWORDS | {"module"}
# After a structural keyword, these show that it was meant as a name (`let fn = 1`).
_AFTER_NAME = frozenset({"=", ":", ",", ")", "]", ">", "=>"})
_OPENERS = frozenset({"(", "["})
_CLOSERS = frozenset({")", "]"})

RESERVED_NOTE = "this word is reserved for future features"


class Abort(Exception):
    """Unwinds to the nearest recovery point after an error was reported."""


class Backtrack(Exception):
    """Unwinds a speculative parse (section 3.3 rules 1, 2 and 15)."""


FAILED = object()  # memo value for a speculation that did not parse


class ParserBase:
    """Cursor over the scanned tokens plus error reporting and recovery."""

    __slots__ = (
        "_error_offsets",
        "comments",
        "depth",
        "diagnostics",
        "ends",
        "file",
        "generic_memo",
        "kinds",
        "pos",
        "speculating",
        "starts",
        "texts",
        "type_memo",
    )

    def __init__(self, tokens: Scan) -> None:
        self.file = tokens.source
        self.kinds = tokens.kinds
        self.texts = tokens.texts
        self.starts = tokens.starts
        self.ends = tokens.ends
        self.comments = tokens.comments
        self.pos = 0
        self.diagnostics: list[Diagnostic] = []
        self._error_offsets: set[int] = set()
        self.speculating = 0
        self.depth = 0
        # Memos of speculative parses keyed by token index (section 3.3 rule 1:
        # remembering failed positions keeps the parse linear).
        self.generic_memo: dict[int, object] = {}
        self.type_memo: dict[int, object] = {}

    # ------------------------------------------------------------ positions

    def span(self, start: int, end: int) -> Span:
        return Span(self.file, start, end)

    def token_span(self, index: int) -> Span:
        return Span(self.file, self.starts[index], self.ends[index])

    def prev_end(self) -> int:
        """End offset of the last consumed token."""
        return self.ends[self.pos - 1] if self.pos > 0 else 0

    def describe(self, index: int) -> str:
        """How a token reads in "expected X, found Y"."""
        kind = self.kinds[index]
        text = self.texts[index]
        shown = text if len(text) <= 24 else text[:21] + "..."
        if kind is EOF:
            return "end of file"
        if kind is IDENT:
            return f"identifier `{shown}`"
        if kind is KEYWORD:
            return f"keyword `{text}`"
        if kind is RESERVED_WORD:
            return f"reserved word `{text}`"
        if kind is INT:
            return f"integer literal `{shown}`"
        if kind is STRING:
            return "string literal"
        if kind is FLOAT:
            return f"float literal `{shown}`"
        return f"`{text}`"

    # ------------------------------------------------------------ errors

    def report(
        self,
        code: str,
        message: str,
        span: Span,
        label: str = "",
        *,
        notes: tuple[str, ...] = (),
        help: tuple[str, ...] = (),
    ) -> None:
        """Record a syntax error, at most one per position; unwinds speculation."""
        if self.speculating:
            raise Backtrack
        if span.start in self._error_offsets:
            return
        self._error_offsets.add(span.start)
        self.diagnostics.append(error(code, message, span, label, notes=notes, help=help))

    def fail(
        self,
        message: str,
        index: int | None = None,
        label: str = "",
        *,
        notes: tuple[str, ...] = (),
        help: tuple[str, ...] = (),
    ) -> Abort:
        """Report E1101 at a token (default: the current one); raise the result."""
        at = self.pos if index is None else index
        self.report("E1101", message, self.token_span(at), label, notes=notes, help=help)
        return Abort()

    def expected(self, what: str, **extra: tuple[str, ...]) -> Abort:
        """E1101 "expected X, found Y" at the current token; `raise` the result."""
        return self.fail(
            f"expected {what}, found {self.describe(self.pos)}",
            label=f"expected {what}",
            notes=extra.get("notes", ()),
            help=extra.get("help", ()),
        )

    def items_to_paren(
        self, item: Callable[[], T], before: Callable[[int], None] | None = None
    ) -> tuple[list[T], bool]:
        """`item`s separated by `,` up to (not past) the closing `)`, and whether a comma
        trails the last; `before(count)` runs ahead of each item (to refuse one too many)."""
        items: list[T] = []
        trailing = False
        while self.texts[self.pos] != ")":
            if before is not None:
                before(len(items))
            items.append(item())
            if self.texts[self.pos] == ",":
                self.pos += 1
                trailing = True
            elif self.texts[self.pos] == ")":
                trailing = False
            else:
                raise self.expected("`,` or `)`")
        return items, trailing

    def keyword_hint(self, words: Iterable[str]) -> tuple[str, ...]:
        """`did you mean `return`?` when the current identifier misspells one of `words`.

        Only when a name follows it (`retrun x`, `blok M`): a keyword starts that
        construct there, whereas a name followed by `(` or an operator is an
        expression.
        """
        pos = self.pos
        if self.kinds[pos] is not IDENT or self.kinds[pos + 1] not in (IDENT, KEYWORD, INT, FLOAT):
            return ()
        return did_you_mean(self.texts[pos], words)  # ties: the first of `words`

    def expect(self, text: str) -> int:
        """Consume the punctuation or keyword `text`; return its end offset."""
        pos = self.pos
        if self.texts[pos] != text:
            raise self.expected(f"`{text}`")
        self.pos = pos + 1
        return self.ends[pos]

    def too_deep(self) -> Abort:
        return self.fail(
            f"nesting too deep: more than {MAX_DEPTH} levels of brackets or operators",
            help=("split the expression with `let` bindings",),
        )

    def reserved_word(self, index: int) -> None:
        word = self.texts[index]
        self.report(
            "E1004",
            f"`{word}` is a reserved word and cannot be used as a name",
            self.token_span(index),
            "reserved word",
            notes=(RESERVED_NOTE,),
            help=("rename it",),
        )

    # ------------------------------------------------------------ names

    def ident(self, what: str = "a name") -> ast.Ident:
        """An identifier; reserved words (E1004) and stray keywords are reported and
        taken as the name, so one misspelt name does not derail the parse."""
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind is not IDENT:
            if kind is RESERVED_WORD:
                self.reserved_word(pos)
            elif kind is KEYWORD and (
                text not in STRUCTURAL_KEYWORDS or self.texts[pos + 1] in _AFTER_NAME
            ):
                self.report(
                    "E1101",
                    f"expected {what}, found keyword `{text}`",
                    self.token_span(pos),
                    "keywords cannot be used as names",
                )
            else:
                raise self.expected(what)
        self.pos = pos + 1
        return ast.Ident(text, Span(self.file, self.starts[pos], self.ends[pos]))

    def is_name(self, index: int) -> bool:
        """An identifier or a reserved word (which `ident` reports as E1004)."""
        kind = self.kinds[index]
        return kind is IDENT or kind is RESERVED_WORD

    # ------------------------------------------------------------ speculation

    def speculate(self, parse: Callable[[], T]) -> T | None:
        """Run `parse`; on any error restore the cursor and return None."""
        pos, depth = self.pos, self.depth
        self.speculating += 1
        try:
            return parse()
        except Backtrack:
            self.pos, self.depth = pos, depth
            return None
        finally:
            self.speculating -= 1

    # ------------------------------------------------------------ recovery

    def recover(self, start: int, *, statement: bool, in_block: bool = False) -> None:
        """Skip from the error to the start of the next statement (or item).

        `start` is the token index where the broken construct began; the brackets
        opened since then are counted so that tokens nested inside the broken
        construct are skipped and the enclosing body's `}` is not.
        """
        texts, kinds = self.texts, self.kinds
        paren = brace = 0
        for i in range(start, self.pos):
            t = texts[i]
            if t in _OPENERS:
                paren += 1
            elif t in _CLOSERS:
                paren = max(paren - 1, 0)
            elif t == "{":
                brace += 1
            elif t == "}":
                brace = max(brace - 1, 0)
                paren = 0
        i = self.pos
        while kinds[i] is not EOF:
            t = texts[i]
            if statement:
                if t in STATEMENT_KEYWORDS or t in ITEM_KEYWORDS or t in MEMBER_KEYWORDS:
                    break
                if t == "}" and brace == 0:
                    break
                if paren == 0 and brace == 0 and kinds[i] is IDENT and texts[i + 1] == "=":
                    break
                if paren == 0 and brace == 0 and t in WRITE_WORDS and texts[i + 1] == "(":
                    break  # a kernel write starts a statement (language-extensions 0.2 rule 22)
            elif brace == 0:
                if t in ITEM_KEYWORDS or t in MEMBER_KEYWORDS:
                    break
                if t == "}" and in_block:
                    break
            if t in _OPENERS:
                paren += 1
            elif t in _CLOSERS:
                paren = max(paren - 1, 0)
            elif t == "{":
                brace += 1
            elif t == "}":
                brace = max(brace - 1, 0)
                paren = 0
            i += 1
        self.pos = i

    def ensure_progress(self, start: int) -> None:
        """Skip one token when a loop iteration consumed nothing (never loop forever)."""
        if self.pos == start and self.kinds[start] is not EOF:
            self.pos = start + 1

    # ------------------------------------------------------------ tree height

    def check_height(self, node: object, start: int) -> None:
        """E1101 when a long expression or type is nested deeper than the limit.

        Recursion and bracket depth are bounded while parsing; this also bounds
        left-deep operator chains, whose height only shows once they are built.
        """
        if self.pos - start <= _HEIGHT_CHECK_TOKENS:
            return
        if tree_height(node) > MAX_DEPTH:
            self.report(
                "E1101",
                f"expression nested too deeply: more than {MAX_DEPTH} levels of operators",
                self.token_span(start),
                help=("split the expression with `let` bindings",),
            )


def tree_height(root: object) -> int:
    """Height of a syntax tree, computed without recursion."""
    best = 0
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack:
        node, height = stack.pop()
        if height > best:
            best = height
        for name in getattr(type(node), "__slots__", ()):
            value = getattr(node, name)
            if isinstance(value, tuple):
                stack.extend((item, height + 1) for item in value if hasattr(item, "span"))
            elif hasattr(value, "span") and not isinstance(value, ast.Ident):
                stack.append((value, height + 1))
    return best
