"""The mistake corpus (bench/mistakes.py): one error per mistake, at the right line, with help.

Prints one table: per kind of mistake, how many programs gave exactly one error,
the expected code, the expected line, a help line on every error, and the
suggestion the mistake calls for (the misspelt name's original, the module
path, the std item); then the totals. Weight cases (a transposed matrix, a
checkpoint key one edit away) count when binding reports exactly one problem
naming the path with its hint.

Usage: python bench/diagnostics.py [--failures] [--per-kind 1]
Aim (issue 11): at least 150 programs; one error, right code and line, with a
help line, for at least 95% of them.
"""

from __future__ import annotations

import argparse
import time

from mistakes import PER_KIND, Outcome, corpus, run, run_weights, weight_mistakes


def table(outcomes: list[Outcome]) -> str:
    kinds: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        kinds.setdefault(outcome.mistake.kind, []).append(outcome)
    header = ("mistake", "cases", "one error", "code", "line", "help", "suggests", "pass")
    rows = [header]
    every = [o for group in kinds.values() for o in group]
    for kind, group in [*sorted(kinds.items()), ("total", every)]:
        rows.append(
            (
                kind,
                str(len(group)),
                *(
                    str(sum(getattr(o, attr) for o in group))
                    for attr in ("one_error", "right_code", "right_line", "has_help", "suggests")
                ),
                f"{sum(o.passed for o in group)} ({100 * sum(o.passed for o in group) / len(group):.1f}%)",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
        if index in (0, len(rows) - 2):
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="list every case that fails")
    parser.add_argument(
        "--per-kind", type=int, default=PER_KIND, help="sites of each kind drawn per file"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run(corpus(args.per_kind)) + run_weights(weight_mistakes(args.per_kind))
    seconds = time.perf_counter() - start
    print(table(outcomes))
    passed = sum(o.passed for o in outcomes)
    print(
        f"\n{len(outcomes)} programs, {passed} pass ({100 * passed / len(outcomes):.1f}%; "
        f"aim >= 95%), checked in {seconds:.1f} s"
    )
    if args.failures:
        for o in outcomes:
            if not o.passed or not o.suggests:
                m = o.mistake
                print(f"\n{m.kind} in {m.origin} ({m.detail}): want {m.code} at line {m.line}")
                for code, line, message, helps in o.errors:
                    print(f"  {code} line {line}: {message} | help: {'; '.join(helps)}")


if __name__ == "__main__":
    main()
