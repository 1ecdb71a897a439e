"""Lexing (language.md section 2): source text in, tokens plus comments out.

`scan` is the fast path the parser uses: it returns the tokens as four parallel
lists (kinds, texts, start and end offsets) so that no `Token` object is built
for the ~200k tokens of a large file. `lex` wraps the same scan into the public
`Token` list for tools (`linnet inspect --tokens`, the formatter's tests).

One compiled regular expression recognises every token form at once; numbers,
strings and comments are then validated on the side (E1001-E1005). Literal
values are not computed here: tokens keep their exact spelling and the parser
derives values (section 2.8).
"""

from __future__ import annotations

import re

from linnet.diagnostics import Diagnostic, error
from linnet.records import record
from linnet.source import SourceFile, Span
from linnet.syntax.tokens import KEYWORDS, RESERVED, Comment, Kind, Token

IDENT = Kind.IDENT
KEYWORD = Kind.KEYWORD
RESERVED_WORD = Kind.RESERVED
INT = Kind.INT
FLOAT = Kind.FLOAT
STRING = Kind.STRING
PUNCT = Kind.PUNCT
EOF = Kind.EOF

_WORD_KIND: dict[str, Kind] = {w: KEYWORD for w in KEYWORDS} | {w: RESERVED_WORD for w in RESERVED}

# Section 2.8: a number is the maximal run of letters, digits and `_` from its first
# digit, then an exponent sign (only right after an `e`/`E`), then a fraction (a `.`
# followed by a digit, so `0..N` and `1.e5` split), which may again end in an exponent.
# Prefixed (hex/binary) forms are always integers, so they take no sign or fraction.
_RUN = r"[A-Za-z0-9_]*"
_SIGN = r"(?:(?<=[eE])[+-][0-9]" + _RUN + ")?"
_NUMBER = r"0[xXbB]" + _RUN + r"|[0-9]" + _RUN + _SIGN + r"(?:\.[0-9]" + _RUN + _SIGN + ")?"

# Characters that can start some token or are whitespace; anything else is E1001.
_STARTERS = r" \t\r\nA-Za-z0-9_\"&|^()\[\]{},:;.=<>+\-*/%!?"

_TOKEN = re.compile(
    r"[ \t\r\n]*(?:"
    r"(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<lc>//[^\n]*?(?=\r?\n|\Z))"
    r"|(?P<bc>/\*)"
    r"|(?P<p>\.\.\.|::|\.\.|->|=>|==|!=|<=|>=|&&|\|\||[&|^()\[\]{},:;.=<>+\-*/%!?])"
    r"|(?P<num>" + _NUMBER + r")"
    r"|(?P<str>\"(?:[^\"\\\n]|\\.)*\")"
    r"|(?P<badstr>\"(?:[^\"\\\n]|\\.)*\\?)"
    r"|(?P<bad>[^" + _STARTERS + r"]+)"
    r"|(?P<eof>\Z))"
)
# The group numbers `scan` dispatches on (faster than group names).
assert list(_TOKEN.groupindex) == ["id", "lc", "bc", "p", "num", "str", "badstr", "bad", "eof"]
_COMMENT_DELIM = re.compile(r"/\*|\*/")
_SURROGATES = re.compile("[\ud800-\udfff]+")  # bytes of invalid UTF-8 (surrogateescape)
_ESCAPE = re.compile(r"\\(?:[nrt0\\\"]|u\{([0-9a-fA-F]{1,6})\})")

_DEC = r"(?:0|[1-9][0-9]*(?:_[0-9]+)*)"
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_NUMBER_PARTS = re.compile(
    r"(?P<int>[0-9][0-9_]*)(?P<frac>\.[0-9_]*)?(?P<exp>[eE][+-]?[0-9_]*)?(?P<rest>.*)", re.DOTALL
)
_BAD_UNDERSCORE = re.compile(r"__|^_|_$")
_INT_OK = re.compile(_DEC + r"|0x[0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0b[01]+(?:_[01]+)*")
_FLOAT_OK = re.compile(
    _DEC + r"(?:\." + _DIGITS + r"(?:[eE][+-]?" + _DIGITS + r")?|[eE][+-]?" + _DIGITS + ")"
)

STRING_HELP = (
    'supported escapes are `\\n \\r \\t \\0 \\\\ \\"` and `\\u{...}` '
    "(1-6 hex digits naming a Unicode scalar value)"
)


@record
class Scan:
    """The tokens of one file as parallel lists; the last token is always EOF."""

    source: SourceFile
    kinds: list[Kind]
    texts: list[str]
    starts: list[int]
    ends: list[int]
    comments: list[Comment]
    diagnostics: list[Diagnostic]


def scan(source: SourceFile) -> Scan:
    """Tokenise `source` into parallel lists (the parser's input)."""
    text = source.text
    kinds: list[Kind] = []
    texts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    comments: list[Comment] = []
    diags: list[Diagnostic] = []
    add_kind, add_text, add_start, add_end = kinds.append, texts.append, starts.append, ends.append
    match = _TOKEN.match
    word_kind = _WORD_KIND.get
    pos = 0
    while True:
        m = match(text, pos)
        assert m is not None  # every character starts some alternative
        group = m.lastindex
        end = m.end()
        if group == 1:  # identifier or keyword
            word = m.group(1)
            add_kind(word_kind(word, IDENT))
            add_text(word)
            add_start(end - len(word))
            add_end(end)
        elif group == 4:  # punctuation
            punct = m.group(4)
            add_kind(PUNCT)
            add_text(punct)
            add_start(end - len(punct))
            add_end(end)
        elif group == 5:  # number
            number = m.group(5)
            start = end - len(number)
            add_kind(_number_kind(number, Span(source, start, end), diags))
            add_text(number)
            add_start(start)
            add_end(end)
        elif group == 2:  # line comment
            start = m.start(2)
            _check_utf8(source, start, end, diags)
            comments.append(
                Comment(text[start:end], Span(source, start, end), _own_line(text, start))
            )
        elif group == 6:  # string
            start = m.start(6)
            literal = m.group(6)
            if "\\" in literal:
                _check_escapes(source, literal, start, diags)
            _check_utf8(source, start, end, diags)
            add_kind(STRING)
            add_text(literal)
            add_start(start)
            add_end(end)
        elif group == 3:  # block comment
            start = m.start(3)
            end = _block_comment_end(source, start, diags)
            _check_utf8(source, start, end, diags)
            comments.append(
                Comment(text[start:end], Span(source, start, end), _own_line(text, start))
            )
        elif group == 7:  # unterminated string
            start = m.start(7)
            literal = m.group(7)
            diags.append(
                error(
                    "E1003",
                    "unterminated string literal",
                    Span(source, start, end),
                    "the string is not closed on this line",
                    notes=("string literals cannot span lines",),
                )
            )
            trailing = len(literal) - len(literal.rstrip("\\"))
            if "\\" in literal:  # a lone `\` before the line break is part of the E1003 above
                _check_escapes(source, literal[: len(literal) - trailing % 2], start, diags)
            _check_utf8(source, start, end, diags)
            add_kind(STRING)
            add_text(literal)
            add_start(start)
            add_end(end)
        elif group == 8:  # invalid characters
            start = m.start(8)
            diags.append(_invalid_characters(Span(source, start, end)))
            if text[start:end] == "@":
                # Recovery only (the file has an error, so the tree is never checked):
                # parse `a @ b` as a product, so the one mistake gives one error.
                add_kind(PUNCT)
                add_text("*")
                add_start(start)
                add_end(end)
        else:  # eof
            add_kind(EOF)
            add_text("")
            add_start(len(text))
            add_end(len(text))
            return Scan(source, kinds, texts, starts, ends, comments, diags)
        pos = end


def lex(source: SourceFile) -> tuple[list[Token], list[Comment], list[Diagnostic]]:
    """Tokens (ending with EOF), comments and lexical diagnostics of `source`."""
    s = scan(source)
    tokens = [
        Token(kind, text, Span(source, start, end))
        for kind, text, start, end in zip(s.kinds, s.texts, s.starts, s.ends, strict=True)
    ]
    return tokens, s.comments, s.diagnostics


def dump_tokens(tokens: list[Token]) -> str:
    """One token per line: `line:col kind text` (for `linnet inspect --tokens`)."""
    lines = []
    for token in tokens:
        line, col = token.span.file.line_col(token.span.start)
        lines.append(f"{line}:{col} {token.kind.name} {token.text!r}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- helpers


def _own_line(text: str, start: int) -> bool:
    """True when only blanks precede offset `start` on its line (section 2.3)."""
    line_start = text.rfind("\n", 0, start) + 1
    return text[line_start:start].strip(" \t\r") == ""


def _block_comment_end(source: SourceFile, start: int, diags: list[Diagnostic]) -> int:
    """End offset of the nested block comment opening at `start` (section 2.3)."""
    depth = 0
    for m in _COMMENT_DELIM.finditer(source.text, start):
        depth += 1 if m.group() == "/*" else -1
        if depth == 0:
            return m.end()
    diags.append(
        error(
            "E1002",
            "unterminated block comment",
            Span(source, start, start + 2),
            "this comment is never closed",
            notes=("block comments nest: every `/*` needs its own `*/`",),
        )
    )
    return len(source.text)


def _check_utf8(source: SourceFile, start: int, end: int, diags: list[Diagnostic]) -> None:
    """E1001 for invalid UTF-8 inside a comment or string (section 2.1)."""
    for m in _SURROGATES.finditer(source.text, start, end):
        diags.append(_invalid_characters(Span(source, m.start(), m.end())))


def _show_char(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02X}"
    if 0xD800 <= code <= 0xDFFF or code < 0x20 or code == 0x7F:
        return f"\\u{{{code:x}}}"
    return ch


def _invalid_characters(span: Span) -> Diagnostic:
    """One E1001 for a run of adjacent invalid characters (section 2.1)."""
    chars = span.text
    shown = "".join(_show_char(c) for c in chars[:16]) + ("..." if len(chars) > 16 else "")
    notes: list[str] = []
    if any("\ud800" <= c <= "\udfff" for c in chars):
        notes.append("source must be UTF-8")
    if any(c > "\x7f" and not "\ud800" <= c <= "\udfff" for c in chars):
        notes.append("outside comments and strings, source is ASCII")
    if any(c < " " or c == "\x7f" for c in chars):
        notes.append("control characters other than tab, CR and LF are not allowed here")
    if all("\ud800" <= c <= "\udfff" for c in chars):
        message = "invalid UTF-8"
    else:
        message = f"invalid character{'s' if len(chars) > 1 else ''} `{shown}`"
    label = (
        "these bytes are not valid UTF-8" if message == "invalid UTF-8" else "cannot start a token"
    )
    if chars == "@":
        return error(
            "E1001",
            "invalid character `@`: Linnet has no matrix-multiplication operator",
            span,
            "not an operator",
            help=(
                "call `matmul(a, b)` after `use std.linalg::{matmul}` "
                "(`batched_matmul` for leading batch axes)",
                "or write the contraction in index notation: "
                "`let c[i, j] = sum[k] a[i, k] * b[k, j]`",
            ),
        )
    return error("E1001", message, span, label, notes=tuple(notes))


def _check_escapes(source: SourceFile, literal: str, start: int, diags: list[Diagnostic]) -> None:
    """E1003 for every unknown escape or bad `\\u{...}` (section 2.8)."""
    i = literal.find("\\")
    while i >= 0:
        m = _ESCAPE.match(literal, i)
        bad_end = i + 2
        if m is not None:
            hexdigits = m.group(1)
            if hexdigits is None:
                i = literal.find("\\", m.end())
                continue
            value = int(hexdigits, 16)
            if value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF:
                i = literal.find("\\", m.end())
                continue
            bad_end = m.end()
            message = f"`\\u{{{hexdigits}}}` is not a Unicode scalar value"
        elif literal.startswith("\\u{", i):
            close = literal.find("}", i)
            body_end = len(literal) - 1 if literal.endswith('"') else len(literal)
            bad_end = close + 1 if close >= 0 else max(body_end, i + 3)
            message = "malformed `\\u{...}` escape"
        elif literal.startswith("\\u", i):
            message = "`\\u` must be followed by `{`, 1-6 hex digits and `}`"
        else:
            bad_end = min(i + 2, len(literal))
            message = f"unknown escape `{literal[i:bad_end]}`"
        span = Span(source, start + i, start + max(bad_end, i + 1))
        diags.append(error("E1003", message, span, "invalid escape", help=(STRING_HELP,)))
        i = literal.find("\\", max(bad_end, i + 1))


def _number_kind(number: str, span: Span, diags: list[Diagnostic]) -> Kind:
    """INT or FLOAT for a number token; E1005 when it is malformed (section 2.8)."""
    if _INT_OK.fullmatch(number):
        return INT
    if _FLOAT_OK.fullmatch(number):
        return FLOAT
    diags.append(error("E1005", _number_problem(number), span, "invalid number"))
    is_prefixed = number[:2].lower() in ("0x", "0b")
    if not is_prefixed and ("." in number or "+" in number or "-" in number):
        return FLOAT
    return INT


def _number_problem(number: str) -> str:
    """Say what is wrong with a malformed number, most specific first."""
    prefix = number[:2]
    if prefix in ("0X", "0B"):
        return f"number prefixes are lower-case: write `{prefix.lower()}`"
    if prefix in ("0x", "0b"):
        digits = number[2:]
        allowed = "0123456789abcdefABCDEF_" if prefix == "0x" else "01_"
        base = "hexadecimal" if prefix == "0x" else "binary"
        bad = next((c for c in digits if c not in allowed), None)
        if bad is not None:
            return f"invalid digit `{bad}` in {base} literal `{number}`"
        if digits.replace("_", "") == "":
            return f"missing digits after `{prefix}`"
        return f"misplaced `_` in `{number}`: `_` may only appear between two digits"
    m = _NUMBER_PARTS.match(number)
    assert m is not None  # every number token starts with a digit
    whole, fraction, exponent, rest = (m.group(g) or "" for g in ("int", "frac", "exp", "rest"))
    if rest.startswith("."):
        return f"a fraction cannot follow the exponent in `{number}`"
    if rest:
        suffix = rest if exponent.strip("eE+-_") else exponent + rest
        return f"invalid suffix `{suffix}` on number `{number}`"
    digit_runs = (whole, fraction[1:], exponent.lstrip("eE+-"))
    if any(_BAD_UNDERSCORE.search(run) for run in digit_runs if "_" in run):
        return f"misplaced `_` in `{number}`: `_` may only appear between two digits"
    if fraction == "." or (exponent and not exponent.strip("eE+-_")):
        return f"missing digits in `{number}`"
    if len(whole) > 1 and whole[0] == "0":
        return f"leading zeros are not allowed in decimal literals: `{number}`"
    return f"malformed number `{number}`"
