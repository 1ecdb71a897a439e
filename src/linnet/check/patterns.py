"""Patterns and `match` (language.md 11.4 patterns, 14.3, 14.5).

Stage: part of the body checker. In: `let`/`static for` patterns and
`MatchExpr` nodes. Out: local bindings (`CheckedProgram.bindings`), the
match's joined type, resolutions of variant arms to `EnumVariant`, and
E2117 (invalid, unreachable or repeated patterns), E2118 (exhaustiveness),
E2115 (arm join).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linnet.check import assignability
from linnet.check.decls import EnumVariant
from linnet.check.types import (
    ERROR,
    BlockType,
    EnumType,
    ErrorType,
    OptionalType,
    TupleType,
    Type,
    show,
)
from linnet.syntax import ast

if TYPE_CHECKING:
    from linnet.check.exprs import BodyChecker


def bind_pattern(
    chk: BodyChecker,
    p: ast.Pattern,
    t: Type,
    kind: str,
    *,
    mutable: bool = False,
    block_path: tuple[str, ...] | None = None,
) -> None:
    """Irrefutable patterns (11.4): names, `_`, tuples; `some`/`none` are E2117 here."""
    if isinstance(p, ast.NamePattern):
        path = block_path if isinstance(t, BlockType) else None
        chk.declare_local(p.name, t, kind, mutable=mutable, block_path=path)
        return
    if isinstance(p, ast.TuplePattern):
        if isinstance(t, TupleType) and len(t.elems) == len(p.elems):
            for sub, et in zip(p.elems, t.elems, strict=True):
                bind_pattern(chk, sub, et, kind, mutable=mutable)
            return
        if not isinstance(t, ErrorType):
            chk.ctx.error(
                "E2117",
                f"this pattern has {len(p.elems)} elements but the value has type {show(t)}",
                p.span,
                "pattern does not fit",
            )
        for sub in p.elems:
            bind_pattern(chk, sub, ERROR, kind, mutable=mutable)
        return
    chk.ctx.error(
        "E2117",
        "`some` and `none` patterns are refutable and not allowed here",
        p.span,
        "refutable pattern",
        help=("use `match` to take an optional apart",),
    )
    if isinstance(p, ast.SomePattern):
        bind_pattern(chk, p.inner, ERROR, kind, mutable=mutable)


def check_match(chk: BodyChecker, e: ast.MatchExpr, expected: Type | None) -> Type:
    scrutinee = chk.expr(e.scrutinee)
    kind: str | None = None
    if isinstance(scrutinee, OptionalType):
        kind = "optional"
    elif isinstance(scrutinee, EnumType):
        kind = "enum"
    elif not isinstance(scrutinee, ErrorType):
        chk.ctx.error(
            "E2117",
            f"`match` needs an optional or an enum, found {show(scrutinee)}",
            e.scrutinee.span,
            "cannot be matched",
            help=("use `if` or `select` for other values",),
        )
    from linnet.check.members import block_path

    path = block_path(chk, e.scrutinee) if kind == "optional" else None
    covered: set[str] = set()
    catch_all = False
    branches: list[tuple[ast.Expr, Type]] = []
    for arm in e.arms:
        pattern = arm.pattern
        chk.push_scope()
        if catch_all:
            chk.ctx.error(
                "E2117",
                "this arm can never match",
                pattern.span,
                "unreachable arm",
                notes=("a previous arm catches every value",),
            )
        if kind == "enum":
            assert isinstance(scrutinee, EnumType)
            catch_all = _enum_arm(chk, pattern, scrutinee, covered) or catch_all
        elif kind == "optional":
            assert isinstance(scrutinee, OptionalType)
            catch_all = _optional_arm(chk, pattern, scrutinee, covered, path) or catch_all
        else:
            _bind_error(chk, pattern)
        value = chk.expr(arm.value, expected)
        branches.append((arm.value, chk.prefer(arm.value, value, expected)))
        chk.pop_scope()
    if kind is not None and not catch_all:
        if kind == "optional":
            missing = [m for m in ("some(_)", "none") if m.split("(")[0] not in covered]
        else:
            assert isinstance(scrutinee, EnumType)
            missing = [v for v in scrutinee.info.variants if v not in covered]
        if missing:
            shown = ", ".join(f"`{m}`" for m in missing)
            chk.ctx.error(
                "E2118",
                "this `match` does not cover every value",
                e.scrutinee.span,
                f"{shown} not covered",
                notes=(f"not covered: {shown}",),
                help=("add the missing arms, or a catch-all `_ => ...`",),
            )
    return assignability.join(chk, branches, "`match` arms", e)


def _enum_arm(chk: BodyChecker, p: ast.Pattern, t: EnumType, covered: set[str]) -> bool:
    """One arm over an enum; True if it catches everything."""
    if isinstance(p, ast.NamePattern):
        name = p.name.name
        if name in t.info.variants:
            if name in covered:
                chk.ctx.error(
                    "E2117",
                    f"the variant `{name}` is already matched",
                    p.span,
                    "repeated arm",
                )
            covered.add(name)
            chk.resolutions[p.name] = EnumVariant(t.info, name)
            return False
        chk.declare_local(p.name, t, "arm")
        return True
    word = "`some`" if isinstance(p, ast.SomePattern) else "`none`"
    if isinstance(p, ast.TuplePattern):
        word = "a tuple pattern"
    chk.ctx.error(
        "E2117",
        f"{word} cannot match a value of enum `{t.info.name}`",
        p.span,
        "wrong kind of pattern",
        help=(f"match the variants: {', '.join(t.info.variants)}",),
    )
    _bind_error(chk, p)
    return False


def _optional_arm(
    chk: BodyChecker,
    p: ast.Pattern,
    t: OptionalType,
    covered: set[str],
    path: tuple[str, ...] | None,
) -> bool:
    """One arm over an optional; True if it catches everything."""
    if isinstance(p, ast.NamePattern):
        chk.declare_local(p.name, t, "arm")
        return True
    if isinstance(p, (ast.SomePattern, ast.NonePattern)):
        word = "some" if isinstance(p, ast.SomePattern) else "none"
        if word in covered:
            chk.ctx.error("E2117", f"`{word}` is already matched", p.span, "repeated arm")
        covered.add(word)
        if isinstance(p, ast.SomePattern):
            bind_pattern(chk, p.inner, t.inner, "arm", block_path=path)
        return False
    chk.ctx.error(
        "E2117",
        "a tuple pattern cannot be a `match` arm",
        p.span,
        "tuple pattern",
        help=("match `some((a, b))` on an optional tuple",),
    )
    _bind_error(chk, p)
    return False


def _bind_error(chk: BodyChecker, p: ast.Pattern) -> None:
    """Bind the names of a pattern whose value has no usable type (no follow-ups)."""
    if isinstance(p, ast.NamePattern):
        local = chk.declare_local(p.name, ERROR, "arm")
        if local is not None:
            local.used = True
    elif isinstance(p, ast.TuplePattern):
        for sub in p.elems:
            _bind_error(chk, sub)
    elif isinstance(p, ast.SomePattern):
        _bind_error(chk, p.inner)
