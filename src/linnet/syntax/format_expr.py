"""Layout documents for expressions, types, patterns and lists (section 17).

Stage: the expression half of the formatter; `syntax.format` adds files,
declarations and statements on top. In: syntax tree nodes (section 3). Out:
`doc` documents, every token emitted through the `CommentCursor` so comments
stay between the tokens they were written between.

The rules implemented here, all from language.md section 17:

- lists (arguments, tuples, shape literals, and the declaration lists built on
  `bracketed`) print on one line when they fit, else one element per line with a
  trailing comma and the closing bracket on its own line; a trailing comma
  written by the author keeps the list expanded (`(a,)` excepted: that comma is
  the syntax of a one-element tuple);
- a chain of binary operators of one precedence level is one group; broken, each
  operator ends its line and the next operand is indented once, or aligned with
  the first operand when the expression starts its own continuation line;
- generic argument lists, index lists and types never break;
- statement and match-arm values: calls, `match`, tuples, shape literals and
  `some(...)` stay after `=`/`=>` and break inside; other values move to the next
  line, indented once, when they do not fit;
- reductions move their body to the next line when too long; `if` is one line or
  the five-line form; `match` always spans several lines;
- parentheses and literal spellings are printed exactly as written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, TypeVar

from linnet.errors import InternalError
from linnet.syntax import ast
from linnet.syntax.doc import (
    BLANKLINE,
    HARDLINE,
    LINE,
    SOFTLINE,
    Concat,
    DocLike,
    concat,
    flat,
    group,
    if_break,
    indent,
)
from linnet.syntax.format_comments import CommentCursor

T = TypeVar(
    "T",
    bound=ast.Ident
    | ast.Param
    | ast.GenericParam
    | ast.Arg
    | ast.Imported
    | ast.Expr
    | ast.KernelOut,
)

Blank = Literal["always", "keep", "never"]
Comma = Literal["added", "always", "none"]

# Section 7.4 precedence levels; a chain is a run of operators of one level.
_LEVEL: Final[dict[str, int]] = {
    "||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "|": 5, "^": 6, "&": 7, "+": 8, "-": 8, "*": 9, "/": 9, "%": 9,
}  # fmt: skip

# Statement and arm values that stay after `=` / `=>` and break inside themselves.
_HUGGED: Final = (
    ast.Call, ast.MatchExpr, ast.TupleExpr, ast.ShapeLit, ast.SomeExpr,
    ast.ForLoop,  # a scan never moves to the next line (language-extensions 1.4)
)  # fmt: skip

_TYPE_NODES: Final = (ast.NamedType, ast.TensorType, ast.TupleType, ast.ArrayType, ast.OptionalType)


class ExprPrinter:
    """Builds documents for expressions, types and patterns."""

    def __init__(self, cursor: CommentCursor) -> None:
        self.c = cursor
        self.tok = cursor.tok
        self._exprs: dict[type, Callable[[Any], DocLike]] = {
            ast.IntLit: self._literal,
            ast.FloatLit: self._literal,
            ast.StringLit: self._literal,
            ast.BoolLit: self._bool,
            ast.NoneLit: self._none,
            ast.Name: self._name,
            ast.Paren: self._paren,
            ast.Unary: self._unary,
            ast.Binary: self._binary,
            ast.Call: self._call,
            ast.Member: self._member,
            ast.Index: self._index,
            ast.TupleExpr: self._tuple,
            ast.SomeExpr: self._some,
            ast.ShapeLit: self._shape,
            ast.Reduction: self._reduction,
            ast.IfExpr: self._if,
            ast.MatchExpr: self._match,
        }
        self._types: dict[type, Callable[[Any], DocLike]] = {
            ast.NamedType: self._named_type,
            ast.TensorType: self._tensor_type,
            ast.TupleType: self._tuple_type,
            ast.ArrayType: self._array_type,
            ast.OptionalType: self._optional_type,
        }

    # ------------------------------------------------------------ shared shapes

    def ident(self, ident: ast.Ident) -> DocLike:
        return self.tok(ident.name)

    def bracketed(
        self,
        open_: str,
        close: str,
        elems: Sequence[T],
        print_elem: Callable[[T], DocLike],
        *,
        expanded: bool = False,
        comma: Comma = "added",
    ) -> DocLike:
        """A breakable list (section 17): flat if it fits, else one element per
        line. `comma` says how the last element ends: "added" when broken,
        "always" (`(a,)`), or "none" (`some(x)`). Inside a type or generic
        argument list, which never break, a trailing comma does not expand it."""
        c = self.c
        expanded = expanded and not c.flat_depth
        opener = self.tok(open_, breaks=True)
        if not elems:
            # Only comments inside: on their own lines unless they are inline.
            tail = c.before_closer()
            closer, after = c.tok_parts(close)
            if _is_hard(opener) or _is_hard(tail):
                return concat(group(opener, indent(tail), HARDLINE, closer), after)
            return concat(opener, tail, closer, after)
        parts: list[DocLike] = [SOFTLINE]
        last = len(elems) - 1
        for i, elem in enumerate(elems):
            parts.append(c.leading(elem.span.start))
            held = c.hold(elem.span.end)
            parts.append(print_elem(elem))
            parts.append(c.release(held))
            if i < last:
                parts.extend((self.tok(",", breaks=True), LINE))
            elif comma == "always":
                parts.append(self.tok(",", breaks=True))
            elif comma == "added":
                # The comma shows only when the list breaks; comments never hide.
                lead = c.leading(c.starts[c.k]) if c.active and c.texts[c.k] == "," else ""
                before, after = c.tok_parts(",", breaks=True)
                parts.extend((lead, if_break(before), after))
        parts.append(c.before_closer())
        closer, after = c.tok_parts(close)
        body = group(opener, indent(Concat(tuple(parts))), SOFTLINE, closer, broken=expanded)
        return concat(body, after) if after != "" else body

    def lines(
        self,
        elems: Sequence[Any],
        print_elem: Callable[[Any], DocLike],
        blank: Callable[[Any, Any], Blank],
    ) -> list[DocLike]:
        """Elements one per line (statements, items, members, arms). `blank`
        decides the separation from the previous element: always one blank line,
        the author's choice (collapsed to one), or none. Blank lines around
        comments are kept either way (section 17)."""
        c = self.c
        parts: list[DocLike] = []
        for i, elem in enumerate(elems):
            start = elem.span.start
            c.newline()
            if i:
                policy = blank(elems[i - 1], elem)
                parts.append(BLANKLINE if policy == "always" else HARDLINE)
                parts.append(c.leading(start))
                if policy == "keep" and c.blank_before(start):
                    parts.append(BLANKLINE)
            else:
                parts.append(c.leading(start))
            held = c.hold(elem.span.end)
            parts.append(print_elem(elem))
            parts.extend((c.release(held), c.flush()))
        return parts

    def braced(
        self,
        elems: Sequence[Any],
        print_elem: Callable[[Any], DocLike],
        blank: Callable[[Any, Any], Blank],
    ) -> DocLike:
        """`{`, elements one per line indented once, `}`; `{}` when empty."""
        c = self.c
        opener = self.tok("{", breaks=True)
        if not elems and not (c.active and c.any_within(c.starts[c.k - 1] + 1, c.starts[c.k])):
            return concat(opener, self.tok("}"))
        inner = self.lines(elems, print_elem, blank)
        inner.append(self.c.before_closer())
        return concat(opener, indent(HARDLINE, *inner), HARDLINE, self.tok("}"))

    def assigned(self, op: str, value: ast.Expr) -> DocLike:
        """` = value` or ` => value`: calls and the other bracketed forms stay
        on the line and break inside; anything else moves down when too long."""
        if isinstance(value, _HUGGED):
            return concat(" ", self.tok(op), " ", self.expr(value))
        before, after = self.c.tok_parts(op, breaks=True)
        return concat(" ", before, group(after, indent(LINE, self.continued(value))))

    # ------------------------------------------------------------ expressions

    def expr(self, e: ast.Expr) -> DocLike:
        printer = self._exprs.get(type(e))
        if printer is None:
            raise InternalError(f"formatter: unexpected expression node {type(e).__name__}")
        return printer(e)

    def continued(self, e: ast.Expr) -> DocLike:
        """An expression that starts its own continuation line: a broken operator
        chain aligns with its first operand instead of indenting."""
        if isinstance(e, ast.Binary):
            return self._binary(e, aligned=True)
        return self.expr(e)

    def gen_arg(self, arg: ast.GenArg) -> DocLike:
        if isinstance(arg, _TYPE_NODES):
            return self.type(arg)
        return self.expr(arg)

    def gen_args(self, args: Sequence[ast.GenArg]) -> DocLike:
        """`<A, 2 * H>`: generic argument lists never break."""
        self.c.flat_depth += 1
        parts: list[DocLike] = [self.tok("<")]
        for i, arg in enumerate(args):
            if i:
                parts.extend((self.tok(","), " "))
            parts.append(self.gen_arg(arg))
        parts.extend((self.c.skip(","), self.tok(">")))
        self.c.flat_depth -= 1
        return flat(Concat(tuple(parts)))

    def _literal(self, e: ast.IntLit | ast.FloatLit | ast.StringLit) -> DocLike:
        return self.tok(e.text)

    def _bool(self, e: ast.BoolLit) -> DocLike:
        return self.tok("true" if e.value else "false")

    def _none(self, e: ast.NoneLit) -> DocLike:
        return self.tok("none")

    def _name(self, e: ast.Name) -> DocLike:
        return self.ident(e.ident)

    def _paren(self, e: ast.Paren) -> DocLike:
        return concat(self.tok("("), self.expr(e.inner), self.tok(")"))

    def _unary(self, e: ast.Unary) -> DocLike:
        return concat(self.tok(e.op), self.expr(e.operand))

    def _binary(self, e: ast.Binary, aligned: bool = False) -> DocLike:
        # Flatten the left spine of one precedence level iteratively: chains can
        # be hundreds of operators long.
        level = _LEVEL[e.op]
        spine: list[ast.Binary] = []
        node: ast.Expr = e
        while isinstance(node, ast.Binary) and _LEVEL[node.op] == level:
            spine.append(node)
            node = node.left
        first = self.expr(node)
        rest: list[DocLike] = []
        for link in reversed(spine):
            rest.extend((" ", self.tok(link.op, breaks=True), LINE, self.expr(link.right)))
        tail = Concat(tuple(rest))
        return group(first, tail if aligned else indent(tail))

    def _call(self, e: ast.Call) -> DocLike:
        callee = self.expr(e.callee)
        generics = self.gen_args(e.generic_args) if e.generic_args is not None else ""
        args = self.bracketed("(", ")", e.args, self._arg, expanded=e.trailing_comma)
        return concat(callee, generics, args)

    def _arg(self, arg: ast.Arg) -> DocLike:
        if arg.name is None:
            return self.expr(arg.value)
        return concat(self.ident(arg.name), " ", self.tok("="), " ", self.expr(arg.value))

    def _member(self, e: ast.Member) -> DocLike:
        return concat(self.expr(e.target), self.tok("."), self.ident(e.name))

    def _index(self, e: ast.Index) -> DocLike:
        target = self.expr(e.target)
        self.c.flat_depth += 1
        parts: list[DocLike] = [self.tok("[")]
        for i, component in enumerate(e.components):
            if i:
                parts.extend((self.tok(","), " "))
            parts.append(self._component(component))
        parts.append(self.tok("]"))
        self.c.flat_depth -= 1
        return concat(target, flat(Concat(tuple(parts))))

    def _component(self, comp: ast.Component) -> DocLike:
        if isinstance(comp, ast.Slice):
            return self._slice(comp)
        if isinstance(comp, ast.EllipsisComponent):
            return self.tok("...")
        if isinstance(comp, ast.PackIndex):
            return concat(self.tok("*"), self.ident(comp.name))
        return self.expr(comp)

    def _slice(self, s: ast.Slice) -> DocLike:
        """`start:stop:step` without spaces: `0::2`, `1:3`, `::2` (section 17)."""
        parts: list[DocLike] = []
        if s.start is not None:
            parts.append(self.expr(s.start))
        if s.stop is None and s.has_step:
            parts.append(self.c.colons())
        else:
            parts.append(self.tok(":"))
            if s.stop is not None:
                parts.append(self.expr(s.stop))
            if s.has_step:
                parts.append(self.tok(":"))
        if s.step is not None:
            parts.append(self.expr(s.step))
        return Concat(tuple(parts))

    def _tuple(self, e: ast.TupleExpr) -> DocLike:
        if len(e.elems) == 1:
            return self.bracketed("(", ")", e.elems, self.expr, comma="always")
        return self.bracketed("(", ")", e.elems, self.expr, expanded=e.trailing_comma)

    def _some(self, e: ast.SomeExpr) -> DocLike:
        return concat(
            self.tok("some"), self.bracketed("(", ")", (e.value,), self.expr, comma="none")
        )

    def _shape(self, e: ast.ShapeLit) -> DocLike:
        return self.bracketed("[", "]", e.elems, self.expr, expanded=e.trailing_comma)

    def _reduction(self, e: ast.Reduction) -> DocLike:
        self.c.flat_depth += 1
        head: list[DocLike] = [self.tok(e.kind)]
        if e.accumulator is not None:
            head.extend((self.tok("<"), self.type(e.accumulator), self.tok(">")))
        head.append(self.tok("["))
        for i, index in enumerate(e.indices):
            if i:
                head.extend((self.tok(","), " "))
            head.append(self.ident(index))
        self.c.flat_depth -= 1
        head.append(self.tok("]", breaks=True))
        return group(flat(Concat(tuple(head))), indent(LINE, self.continued(e.body)))

    def _if(self, e: ast.IfExpr) -> DocLike:
        return group(
            self.tok("if"), " ", self.expr(e.cond), " ", self.tok("{", breaks=True),
            indent(LINE, self._branch(e.then)), LINE,
            self.tok("}"), " ", self.tok("else"), " ", self.tok("{", breaks=True),
            indent(LINE, self._branch(e.otherwise)), LINE,
            self.tok("}"),
        )  # fmt: skip

    def _branch(self, value: ast.Expr) -> DocLike:
        held = self.c.hold(value.span.end)
        doc = self.continued(value)
        return concat(doc, self.c.release(held))

    def _match(self, e: ast.MatchExpr) -> DocLike:
        head = concat(self.tok("match"), " ", self.expr(e.scrutinee), " ")
        arms = self.braced(e.arms, self._arm, _no_blank)
        return concat(head, arms)

    def _arm(self, arm: ast.Arm) -> DocLike:
        return concat(self.pattern(arm.pattern), self.assigned("=>", arm.value))

    # ------------------------------------------------------------ patterns

    def pattern(self, p: ast.Pattern) -> DocLike:
        """Patterns are short and never break."""
        self.c.flat_depth += 1
        doc = self._pattern(p)
        self.c.flat_depth -= 1
        return doc

    def _pattern(self, p: ast.Pattern) -> DocLike:
        if isinstance(p, ast.NamePattern):
            return self.ident(p.name)
        if isinstance(p, ast.NonePattern):
            return self.tok("none")
        if isinstance(p, ast.SomePattern):
            return concat(self.tok("some"), self.tok("("), self._pattern(p.inner), self.tok(")"))
        parts: list[DocLike] = [self.tok("(")]
        for i, elem in enumerate(p.elems):
            if i:
                parts.extend((self.tok(","), " "))
            parts.append(self._pattern(elem))
        parts.append(self.tok(",") if len(p.elems) == 1 else self.c.skip(","))
        parts.append(self.tok(")"))
        return flat(Concat(tuple(parts)))

    # ------------------------------------------------------------ types

    def type(self, t: ast.Type) -> DocLike:
        """A type, which never breaks (section 17, "Types")."""
        printer = self._types.get(type(t))
        if printer is None:
            raise InternalError(f"formatter: unexpected type node {type(t).__name__}")
        c = self.c
        c.flat_depth += 1
        # `(T)` is just `T` (section 3.2): the tree keeps no parentheses around
        # a type, so they are left out, their comments kept.
        parens = 0
        dropped: list[DocLike] = []
        while c.active and c.texts[c.k] == "(" and c.starts[c.k] < t.span.start:
            dropped.append(c.skip("("))
            parens += 1
        dropped.append(printer(t))
        for _ in range(parens):
            dropped.append(c.skip(")"))
        c.flat_depth -= 1
        return flat(Concat(tuple(dropped)))

    def _named_type(self, t: ast.NamedType) -> DocLike:
        parts: list[DocLike] = []
        for i, segment in enumerate(t.path):
            if i:
                parts.append(self.tok("."))
            parts.append(self.ident(segment))
        if t.args is not None:
            parts.append(self.gen_args(t.args))
        return Concat(tuple(parts))

    def _tensor_type(self, t: ast.TensorType) -> DocLike:
        parts: list[DocLike] = [self.tok("Tensor"), self.tok("[")]
        for i, dim in enumerate(t.dims):
            if i:
                parts.extend((self.tok(","), " "))
            if isinstance(dim, ast.PackRef):
                parts.extend((self.tok("*"), self.ident(dim.name)))
            else:
                parts.append(self.expr(dim))
        parts.extend((self.tok(";"), " ", self._named_type(t.elem), self.tok("]")))
        return Concat(tuple(parts))

    def _tuple_type(self, t: ast.TupleType) -> DocLike:
        parts: list[DocLike] = [self.tok("(")]
        for i, elem in enumerate(t.elems):
            if i:
                parts.extend((self.tok(","), " "))
            parts.append(self.type(elem))
        parts.append(self.tok(",") if len(t.elems) == 1 else self.c.skip(","))
        parts.append(self.tok(")"))
        return Concat(tuple(parts))

    def _array_type(self, t: ast.ArrayType) -> DocLike:
        return concat(
            self.tok("["), self.type(t.elem), self.tok(";"), " ", self.expr(t.length), self.tok("]")
        )

    def _optional_type(self, t: ast.OptionalType) -> DocLike:
        return concat(self.type(t.inner), self.tok("?"))


def _is_hard(d: DocLike) -> bool:
    return not isinstance(d, str) and d.hard


def _no_blank(previous: object, current: object) -> Blank:
    return "never"
