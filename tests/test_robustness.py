"""Robustness: no input makes the front end raise.

Random bytes, random token soup and mutations of valid programs go through the
parser, the checker (via the pipeline) and the formatter. Every run must end in
success or coded diagnostics; a formatted result must re-parse to the same tree.
The default run is derandomized so CI is stable; `-m slow` runs many more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linnet.diagnostics import CODES
from linnet.pipeline import check_source
from linnet.source import SourceFile
from linnet.syntax.ast import same_tree
from linnet.syntax.format import format_source
from linnet.syntax.parser import parse
from linnet.syntax.tokens import KEYWORDS, PUNCTUATION

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted(
    p for p in ROOT.rglob("*.linnet") if ".venv" not in p.parts and "invalid" not in p.parts
)
CORPUS_TEXTS = [p.read_bytes() for p in CORPUS]

WORDS = sorted(KEYWORDS) + list(PUNCTUATION) + [
    "x", "H", "B", "T", "f32", "bf16", "i32", "Tensor", "Dim", "Shape", "Float", "sum", "max",
    "cast", "reshape", "0", "1", "2.5", "1e-5", "0xff", '"s"', "//c\n", "/* c */", "\n",
]  # fmt: skip

FAST = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    max_examples=int(os.environ.get("LINNET_FUZZ_EXAMPLES", "4000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run_front_end(data: bytes) -> None:
    """Parse, check and format `data`; fail on any exception or inconsistency."""
    source = SourceFile.from_bytes("fuzz.linnet", data)
    tree, diagnostics = parse(source)
    assert all(d.code in CODES for d in diagnostics)
    program = check_source(source.text, "fuzz.linnet")
    assert all(d.code in CODES for d in program.diagnostics)
    formatted, format_diagnostics = format_source(source)
    assert all(d.code in CODES for d in format_diagnostics)
    if formatted is not None:
        again, again_diagnostics = parse(SourceFile("fuzz.linnet", formatted))
        assert not [d for d in again_diagnostics if d.is_error], formatted
        assert tree is not None and again is not None
        assert same_tree(tree, again), formatted
        second, _ = format_source(SourceFile("fuzz.linnet", formatted))
        assert second == formatted


token_soup = st.lists(st.sampled_from(WORDS), max_size=80).map(lambda ws: " ".join(ws).encode())


@st.composite
def mutated_program(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(CORPUS_TEXTS)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["delete", "insert", "duplicate", "swap"]))
        if action == "delete":
            del data[at : at + draw(st.integers(1, 12))]
        elif action == "insert":
            data[at:at] = draw(st.sampled_from(WORDS)).encode()
        elif action == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 40))]
        else:
            other = draw(st.integers(0, len(data) - 1))
            data[at], data[other] = data[other], data[at]
    return bytes(data)


def test_corpus_is_not_empty() -> None:
    assert len(CORPUS) >= 5


@FAST
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    run_front_end(data)


@FAST
@given(token_soup)
def test_random_token_sequences(data: bytes) -> None:
    run_front_end(b"module fuzz\n" + data)


@FAST
@given(mutated_program())
def test_mutated_programs(data: bytes) -> None:
    run_front_end(data)


@pytest.mark.slow
@SLOW
@given(st.one_of(st.binary(max_size=2000), token_soup, mutated_program()))
def test_many_inputs(data: bytes) -> None:
    run_front_end(data)
