"""Clauses a model states about its sizes, added to the imported entry's `where` clause.

Why: a dynamic Linnet export carries, as metadata, the constraints its
generics must meet at run time (the entry's own `where` clauses on dynamic
generics and the size guards of `linnet.ir.size_decisions`). Importing the
model back must keep them, or the imported entry would accept sizes the
graph was never right for. The importer reads them as data (`dim_to_json`
form, generic names as the model's `dim_param`s) and this module states
each one over the imported entry's generics, in the form people write
(`N > 4`, `N <= 8`, not `N - 4 > 0`), skipping what the facts already prove.
"""

from __future__ import annotations

from collections.abc import Sequence

from linnet.check.dims import Dim
from linnet.errors import LinnetError
from linnet.ir.symbolic import dim_from_json
from linnet.sourcegen.refusals import ImportRefusedError
from linnet.sourcegen.translate import Translation

StatedClause = tuple[object, str, object, str]
"""lhs and rhs in `dim_to_json` form, the relation, and the clause's text (for errors)."""

FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def state_where(t: Translation, clauses: Sequence[StatedClause], label: str) -> None:
    """Add each clause to `t.where` (ImportRefusedError when one names no entry generic)."""
    for lhs_data, rel, rhs_data, text in clauses:

        def generic(name: str, text: str = text) -> Dim:
            sym = t.dim_params.get(name)
            if sym is None:
                raise ImportRefusedError(
                    f"cannot import {label}: its size constraint `{text}` names `{name}`, "
                    "which is no axis of the inputs, so the imported entry has no such "
                    "generic to state it on"
                )
            return Dim.symbol(sym)

        try:
            lhs, rhs = dim_from_json(lhs_data, generic), dim_from_json(rhs_data, generic)
        except ImportRefusedError:
            raise
        except LinnetError as exc:
            raise ImportRefusedError(f"cannot import {label}: constraint `{text}`: {exc}") from None
        lhs, rel, rhs = readable(t.facts.simplify(lhs), rel, t.facts.simplify(rhs))
        if not t.facts.prove(lhs, rel, rhs):
            t.where.append((lhs, rel, rhs))
            t.facts = t.facts.assume(lhs, rel, rhs)


def readable(lhs: Dim, rel: str, rhs: Dim) -> tuple[Dim, str, Dim]:
    """`lhs rel rhs` with the sizes on the left and the constant on the right, the left
    side's leading sign positive: `N - 4 > 0` is `N > 4`, `8 - N >= 0` is `N <= 8`."""
    difference = lhs - rhs
    constant = next((c for mono, c in difference.terms if not mono), 0)
    sizes = difference - constant
    if not sizes.terms:
        return lhs, rel, rhs
    if sizes.terms[0][1] < 0:
        return -sizes, FLIPPED[rel], Dim.const(constant)
    return sizes, rel, Dim.const(-constant)
