"""The mistake corpus of issue 11 (`bench/mistakes.py`): one error per mistake, with help.

Each program is a valid example or std module with one seeded mistake whose
expected code and line follow from the mutation. The aim: exactly one error,
with that code, at that line, with a help line, for at least 95% of at least
150 programs; and every error of every case carries a help line.

The whole corpus takes about half a minute (every case loads and checks its
package and the std modules it imports), so it is `slow`; the default run
checks an evenly spread sixth of it against the same aim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import mistakes

AIM = 0.95


def _assert_aim(outcomes: list[mistakes.Outcome]) -> None:
    failed = [
        (o.mistake.kind, o.mistake.origin, o.mistake.detail, o.mistake.code, o.mistake.line)
        for o in outcomes
        if not o.passed
    ]
    assert len(outcomes) - len(failed) >= AIM * len(outcomes), failed
    without_help = [(o.mistake.kind, o.mistake.detail) for o in outcomes if not o.has_help]
    assert not without_help


@pytest.fixture(scope="module")
def cases() -> list[mistakes.Mistake]:
    return mistakes.corpus()


@pytest.fixture(scope="module")
def weights() -> list[mistakes.WeightMistake]:
    return mistakes.weight_mistakes()


def test_corpus_is_large_and_covers_every_kind_of_mistake(
    cases: list[mistakes.Mistake], weights: list[mistakes.WeightMistake]
) -> None:
    assert len(cases) + len(weights) >= 150
    kinds = {c.kind for c in cases} | {w.kind for w in weights}
    for kind in (
        "misspelt keyword",
        "misspelt local",
        "misspelt parameter",
        "misspelt function",
        "misspelt prelude function",
        "misspelt member",
        "misspelt method",
        "misspelt block",
        "misspelt generic",
        "misspelt constant",
        "misspelt import",
        "misspelt module",
        "missing import",
        "torch name",
        "wrong arity",
        "swapped arguments",
        "wrong dtype",
        "bad generic",
        "transposed weight",
        "misspelt checkpoint key",
    ):
        assert kind in kinds
    # Seeded: the same sites on every run (the weights draw is checked the same way).
    again = mistakes.weight_mistakes()
    assert [(w.path, w.stored_name) for w in again] == [(w.path, w.stored_name) for w in weights]


def test_a_sixth_of_the_corpus_meets_the_aim(
    cases: list[mistakes.Mistake], weights: list[mistakes.WeightMistake]
) -> None:
    _assert_aim(mistakes.run(cases[::6]) + mistakes.run_weights(weights[::6]))


@pytest.mark.slow
def test_the_whole_corpus_meets_the_aim(
    cases: list[mistakes.Mistake], weights: list[mistakes.WeightMistake]
) -> None:
    _assert_aim(mistakes.run(cases) + mistakes.run_weights(weights))


def test_a_mutation_of_a_valid_file_is_judged_against_its_own_expectation(
    cases: list[mistakes.Mistake],
) -> None:
    """The runner reports what checking gave; a wrong expectation fails the case."""
    case = next(c for c in cases if c.kind == "misspelt method")
    moved = mistakes.Mistake(case.kind, case.origin, case.text, case.code, case.line + 1)
    right, wrong = mistakes.run([case, moved])
    assert right.passed and right.suggests
    assert not wrong.passed and wrong.right_code and not wrong.right_line
