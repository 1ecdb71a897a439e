"""The lexer against language.md section 2: every token form, literal and error."""

from __future__ import annotations

import pytest

from linnet.source import SourceFile
from linnet.syntax.lexer import dump_tokens, lex, scan
from linnet.syntax.tokens import KEYWORDS, PUNCTUATION, RESERVED, Kind


def tokens_of(text: str) -> list[tuple[str, str]]:
    tokens, _, diagnostics = lex(SourceFile("t.linnet", text))
    assert diagnostics == [], [d.message for d in diagnostics]
    assert tokens[-1].kind is Kind.EOF
    return [(t.kind.name, t.text) for t in tokens[:-1]]


def diagnostics_of(text: str | bytes) -> list[tuple[str, str]]:
    """(code, spanned text) of every lexical diagnostic."""
    source = (
        SourceFile.from_bytes("t.linnet", text)
        if isinstance(text, bytes)
        else SourceFile("t", text)
    )
    _, _, diagnostics = lex(source)
    return [(d.code, d.span.text if d.span else "") for d in diagnostics]


# ---------------------------------------------------------------- tokens


def test_identifiers_keywords_and_reserved_words() -> None:
    assert tokens_of("x _ _1 Tensor f32 sum random") == [("IDENT", w) for w in
        ["x", "_", "_1", "Tensor", "f32", "sum", "random"]]  # fmt: skip
    assert tokens_of(" ".join(sorted(KEYWORDS))) == [("KEYWORD", w) for w in sorted(KEYWORDS)]
    assert tokens_of(" ".join(sorted(RESERVED))) == [("RESERVED", w) for w in sorted(RESERVED)]


def test_every_punctuation_token_longest_first() -> None:
    assert tokens_of(" ".join(PUNCTUATION)) == [("PUNCT", p) for p in PUNCTUATION]
    # Longest match without spaces (2.9).
    assert [t for _, t in tokens_of("a...b::c..d->e=>f==g!=h<=i>=j&&k||l")] == [
        "a", "...", "b", "::", "c", "..", "d", "->", "e", "=>", "f", "==", "g", "!=",
        "h", "<=", "i", ">=", "j", "&&", "k", "||", "l",
    ]  # fmt: skip
    assert [t for _, t in tokens_of("x[::2]")] == ["x", "[", "::", "2", "]"]
    assert [t for _, t in tokens_of("a<=-b")] == ["a", "<=", "-", "b"]


@pytest.mark.parametrize(
    "literal", ["0", "42", "1_000_000", "0xff", "0xDEAD_BEEF", "0b1010_0001", "9223372036854775808"]
)
def test_integer_literals(literal: str) -> None:
    assert tokens_of(literal) == [("INT", literal)]


@pytest.mark.parametrize(
    "literal", ["0.0", "1.5", "2.5e-3", "1e-5", "6E4", "3.141_592", "1e+7", "0e0"]
)
def test_float_literals(literal: str) -> None:
    assert tokens_of(literal) == [("FLOAT", literal)]


def test_number_boundaries() -> None:
    # 2.8: a fraction needs a digit after the dot.
    assert tokens_of("0..N") == [("INT", "0"), ("PUNCT", ".."), ("IDENT", "N")]
    assert tokens_of("1.e5") == [("INT", "1"), ("PUNCT", "."), ("IDENT", "e5")]
    assert tokens_of("1..Steps + 1") == [
        ("INT", "1"), ("PUNCT", ".."), ("IDENT", "Steps"), ("PUNCT", "+"), ("INT", "1"),
    ]  # fmt: skip
    # An `e` in a hex literal is a digit, so no exponent sign is taken.
    assert tokens_of("0x1e+5") == [("INT", "0x1e"), ("PUNCT", "+"), ("INT", "5")]
    assert tokens_of("2-1") == [("INT", "2"), ("PUNCT", "-"), ("INT", "1")]
    assert tokens_of("x.0") == [("IDENT", "x"), ("PUNCT", "."), ("INT", "0")]


def test_strings_keep_their_spelling() -> None:
    assert tokens_of(r'"a b" "esc \n \r \t \0 \\ \" \u{41} \u{10FFFF}" "é ∑"') == [
        ("STRING", '"a b"'),
        ("STRING", r'"esc \n \r \t \0 \\ \" \u{41} \u{10FFFF}"'),
        ("STRING", '"é ∑"'),
    ]


def test_spans_cover_exactly_the_token_text() -> None:
    text = "module a.b\n\nfn f<T: Dim>(x: Tensor[T; f32]) -> f32 { return x[0] * 2.5e-3 }\n"
    tokens, _, _ = lex(SourceFile("t", text))
    for token in tokens:
        assert text[token.span.start : token.span.end] == token.text
    assert tokens[-1].span.start == tokens[-1].span.end == len(text)


def test_scan_and_lex_agree() -> None:
    source = SourceFile("t", "module m\nconst A = 1 // x\n")
    s = scan(source)
    tokens, comments, diagnostics = lex(source)
    assert [t.text for t in tokens] == s.texts
    assert [t.kind for t in tokens] == s.kinds
    assert [t.span.start for t in tokens] == s.starts
    assert comments == s.comments and diagnostics == s.diagnostics


def test_dump_tokens_one_per_line() -> None:
    tokens, _, _ = lex(SourceFile("t", "let x\n= 1"))
    assert dump_tokens(tokens) == (
        "1:1 KEYWORD 'let'\n1:5 IDENT 'x'\n2:1 PUNCT '='\n2:3 INT '1'\n2:4 EOF ''\n"
    )


# ---------------------------------------------------------------- comments


def test_comments_go_to_the_side_list_with_placement() -> None:
    text = "// head\nlet x = 1 // tail\n  /// doc\n/** block doc */ y /* a /* nested */ b */ z\n"
    tokens, comments, diagnostics = lex(SourceFile("t", text))
    assert diagnostics == []
    assert [t.text for t in tokens[:-1]] == ["let", "x", "=", "1", "y", "z"]
    assert [(c.text, c.own_line) for c in comments] == [
        ("// head", True),
        ("// tail", False),
        ("/// doc", True),
        ("/** block doc */", True),
        ("/* a /* nested */ b */", False),
    ]
    assert comments[4].is_block and not comments[0].is_block


def test_crlf_line_endings() -> None:
    tokens, comments, diagnostics = lex(SourceFile("t", "let x // note\r\n= 1\r\n"))
    assert diagnostics == [] and [c.text for c in comments] == ["// note"]
    assert [t.text for t in tokens] == ["let", "x", "=", "1", ""]


def test_comments_may_hold_any_unicode_and_control_characters() -> None:
    assert diagnostics_of("// é ∑ \x07\n/* ü \x01 */ x") == []


def test_unterminated_block_comment_is_e1002_at_the_opening() -> None:
    text = "x /* outer /* inner */ never closed"
    _, comments, diagnostics = lex(SourceFile("t", text))
    assert [(d.code, d.span.text if d.span else "") for d in diagnostics] == [("E1002", "/*")]
    assert diagnostics[0].span is not None and diagnostics[0].span.start == 2
    assert comments[0].text == text[2:]


# ---------------------------------------------------------------- lexical errors


def test_adjacent_invalid_characters_are_one_e1001() -> None:
    assert diagnostics_of("a @#$ b ~ c") == [("E1001", "@#$"), ("E1001", "~")]


def test_non_ascii_outside_comments_and_strings() -> None:
    _, _, diagnostics = lex(SourceFile("t", "let café = 1"))
    assert [(d.code, d.span.text if d.span else "") for d in diagnostics] == [("E1001", "é")]
    assert any("ASCII" in note for note in diagnostics[0].notes)


def test_control_characters_outside_comments() -> None:
    _, _, diagnostics = lex(SourceFile("t", "a\x00\x07b\tc\r\nd\x0c"))
    assert [(d.code, d.span.text if d.span else "") for d in diagnostics] == [
        ("E1001", "\x00\x07"),
        ("E1001", "\x0c"),
    ]
    assert "\\u{0}" in diagnostics[0].message


def test_invalid_utf8_anywhere() -> None:
    found = diagnostics_of(b'x \xff\xfe y // \xc3\n"\x80"')
    assert [code for code, _ in found] == ["E1001", "E1001", "E1001"]
    _, _, diagnostics = lex(SourceFile.from_bytes("t", b"\xff"))
    assert diagnostics[0].notes == ("source must be UTF-8",)


def test_byte_order_mark_is_skipped() -> None:
    tokens, _, diagnostics = lex(SourceFile.from_bytes("t", b"\xef\xbb\xbfmodule m"))
    assert diagnostics == [] and tokens[0].text == "module" and tokens[0].span.start == 0


@pytest.mark.parametrize(
    ("text", "spanned"),
    [
        ('"abc', '"abc'),  # unterminated at end of file
        ('"abc\ndef', '"abc'),  # strings cannot span lines
        (r'"\q"', r"\q"),
        (r'"\u{}"', r"\u{}"),
        (r'"\u{D800}"', r"\u{D800}"),
        (r'"\u{110000}"', r"\u{110000}"),
        (r'"\u{1234567}"', r"\u{1234567}"),
        (r'"\u41"', r"\u"),
        ('"ends in a backslash\\\nx', '"ends in a backslash\\'),
    ],
)
def test_invalid_strings_are_e1003(text: str, spanned: str) -> None:
    assert diagnostics_of(text) == [("E1003", spanned)]


def test_bad_escape_suggests_the_supported_ones() -> None:
    _, _, diagnostics = lex(SourceFile("t", r'"\x"'))
    assert diagnostics[0].help and "\\u{...}" in diagnostics[0].help[0]


def test_unterminated_string_still_yields_a_token() -> None:
    tokens, _, _ = lex(SourceFile("t", 'let s = "abc\nlet t = 1'))
    assert [t.kind.name for t in tokens[:5]] == ["KEYWORD", "IDENT", "PUNCT", "STRING", "KEYWORD"]


@pytest.mark.parametrize(
    ("literal", "words"),
    [
        ("007", "leading zero"),
        ("00.5", "leading zero"),
        ("1__0", "misplaced `_`"),
        ("1_", "misplaced `_`"),
        ("0x_1", "misplaced `_`"),
        ("1_.5", "misplaced `_`"),
        ("1e_5", "misplaced `_`"),
        ("0X1F", "lower-case"),
        ("0B1", "lower-case"),
        ("0b102", "invalid digit `2`"),
        ("0xfg", "invalid digit `g`"),
        ("0x", "missing digits"),
        ("0b", "missing digits"),
        ("12abc", "invalid suffix `abc`"),
        ("1.5x", "invalid suffix `x`"),
        ("1e", "missing digits"),
        ("1.5e", "missing digits"),
        ("1e5.5", "fraction cannot follow the exponent"),
    ],
)
def test_malformed_numbers_are_one_e1005_token(literal: str, words: str) -> None:
    tokens, _, diagnostics = lex(SourceFile("t", literal))
    assert len(tokens) == 2 and tokens[0].text == literal  # one token, then EOF
    assert [d.code for d in diagnostics] == ["E1005"]
    assert words in diagnostics[0].message.lower() or words in diagnostics[0].message


def test_every_lexical_error_at_once() -> None:
    text = 'module m @ // ok\nconst A = 007 "\\q" /* open'
    assert [code for code, _ in diagnostics_of(text)] == ["E1001", "E1005", "E1003", "E1002"]
