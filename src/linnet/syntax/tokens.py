"""Token kinds and the word lists of section 2.

The lexer turns source text into a tuple of `Token`s. Comments are not tokens
the parser sees; the lexer returns them on the side for the formatter.
"""

from __future__ import annotations

from enum import Enum

from linnet.records import record
from linnet.source import Span


class Kind(Enum):
    IDENT = "identifier"
    KEYWORD = "keyword"
    RESERVED = "reserved word"
    INT = "integer literal"
    FLOAT = "float literal"
    STRING = "string literal"
    PUNCT = "punctuation"
    EOF = "end of file"


# Section 2.5.
KEYWORDS: frozenset[str] = frozenset(
    """module use pub crate self super as const type struct enum fn op block entry
    param buffer state sub let var return if else match static for in while yield where
    true false none some extern kernel""".split()
)

# Section 2.6: E1004 when used as any name.
RESERVED: frozenset[str] = frozenset(
    "async await effect unsafe macro trait impl derive rng mut ref device".split()
)

# Section 2.9, longest first.
PUNCTUATION: tuple[str, ...] = (
    "...", "::", "..", "->", "=>", "==", "!=", "<=", ">=", "&&", "||",
    "&", "|", "^", "(", ")", "[", "]", "{", "}", ",", ":", ";", ".", "=",
    "<", ">", "+", "-", "*", "/", "%", "!", "?",
)  # fmt: skip

SCALAR_TYPES: frozenset[str] = frozenset(
    "bool i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64".split()
)
KIND_NAMES: tuple[str, ...] = ("Dim", "Shape", "DType", "Numeric", "Integer", "Float")
# language-extensions 0.1: contextual words starting a kernel write statement.
WRITE_WORDS: frozenset[str] = frozenset({"store", "atomic_add", "atomic_max", "atomic_min"})
REDUCTION_WORDS: frozenset[str] = frozenset("sum prod max min any all".split())

# Section 10.1 (and `cumsum`, language-extensions 0.3): no declaration may use these (E1207).
PRELUDE_FUNCTIONS: frozenset[str] = frozenset(
    """cast reshape permute broadcast_to concat iota fill exp log sqrt rsqrt sin cos
    tanh abs min max shl shr select pad gather scatter cumsum""".split()
)
PRELUDE_NAMES: frozenset[str] = (
    PRELUDE_FUNCTIONS | SCALAR_TYPES | frozenset(KIND_NAMES) | frozenset({"Tensor"})
)


@record(frozen=True)
class Token:
    """One token. `text` is the exact source spelling (literals keep theirs)."""

    kind: Kind
    text: str
    span: Span

    def is_punct(self, text: str) -> bool:
        return self.kind is Kind.PUNCT and self.text == text

    def is_keyword(self, text: str) -> bool:
        return self.kind is Kind.KEYWORD and self.text == text


@record(frozen=True)
class Comment:
    """A comment kept for the formatter. `own_line`: nothing but blanks before it."""

    text: str
    span: Span
    own_line: bool

    @property
    def is_block(self) -> bool:
        return self.text.startswith("/*")
