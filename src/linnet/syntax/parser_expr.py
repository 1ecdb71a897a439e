"""Expressions, types, generic arguments and patterns (language.md 3.2, 3.3).

Binary operators are parsed by precedence climbing over the table of 7.4 instead
of one function per level, which keeps the call depth per operand small; the
grammar is otherwise followed production by production. The ambiguous spots are
decided exactly as section 3.3 says, each at the place cited in its comment.
"""

from __future__ import annotations

import re
from typing import cast

from linnet.source import Span
from linnet.syntax import ast
from linnet.syntax.lexer import FLOAT, IDENT, INT, KEYWORD, RESERVED_WORD, STRING
from linnet.syntax.parser_base import FAILED, MAX_DEPTH, Backtrack, ParserBase
from linnet.syntax.tokens import REDUCTION_WORDS

# Section 7.4, loosest (1) to tightest (9); all left-associative.
BINARY_PRECEDENCE: dict[str, int] = {
    "||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
    "|": 5, "^": 6, "&": 7, "+": 8, "-": 8, "*": 9, "/": 9, "%": 9,
}  # fmt: skip
ADD_PRECEDENCE = 8  # GenArg ::= Type | AddExpr (3.3 rule 2)
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_PREFIX = frozenset({"!", "-", "+"})
# Tokens that can continue an operand (suffixes) or an expression (operators):
# after a name or integer not followed by one of these, the operand is complete.
_POSTFIX_STARTS = frozenset({"(", "[", ".", "<"})
_CONTINUES = _POSTFIX_STARTS | BINARY_PRECEDENCE.keys()
_TYPE_CONTINUES = frozenset({".", "<", "[", "?"})  # after a word, these extend a type
_GEN_ARG_END = frozenset({",", ">"})
_SLICE_END = frozenset({",", "]"})
_STOP_END = frozenset({",", "]", ":", "::"})
_ESCAPES = re.compile(r"\\(?:u\{([0-9a-fA-F]{1,6})\}|(.))", re.DOTALL)
_ESCAPE_VALUES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\", '"': '"'}


def int_value(text: str) -> int:
    """The value of an integer literal's spelling (section 2.8); 0 if malformed.

    Range is not checked here: the checker reports E2105 beyond the i64 maximum.
    """
    if text.isdigit() and len(text) < 19:
        return int(text)
    digits = text.replace("_", "")
    try:
        if digits[:2] == "0x":
            return int(digits[2:], 16)
        if digits[:2] == "0b":
            return int(digits[2:], 2)
        if len(digits) <= 4000:
            return int(digits, 10)
        value = 0  # NOTE: int() refuses over 4300 decimal digits; convert in chunks
        for k in range(0, len(digits), 1000):
            chunk = digits[k : k + 1000]
            value = value * 10 ** len(chunk) + int(chunk, 10)
        return value
    except ValueError:
        return 0


def float_value(text: str) -> float:
    """The value of a float literal (may be inf; the checker reports E2105)."""
    try:
        return float(text.replace("_", ""))
    except ValueError:
        return 0.0


def string_value(text: str) -> str:
    """The value of a string literal with its escapes decoded (section 2.8)."""
    body = text[1:-1] if len(text) >= 2 and text.endswith('"') else text[1:]
    if "\\" not in body:
        return body

    def decode(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            code = int(m.group(1), 16)
            return chr(code) if code <= 0x10FFFF else m.group(0)
        return _ESCAPE_VALUES.get(m.group(2), m.group(0))

    return _ESCAPES.sub(decode, body)


class ExprParser(ParserBase):
    """Types, generic arguments, expressions and patterns."""

    __slots__ = ()

    # ============================================================ types

    def root_type(self) -> ast.Type:
        """A type in a declaration or statement (its height is checked)."""
        start = self.pos
        result = self.type_()
        self.check_height(result, start)
        return result

    def type_(self) -> ast.Type:
        """Type ::= BaseType '?'?"""
        pos = self.pos
        if self.kinds[pos] is IDENT and self.texts[pos + 1] not in _TYPE_CONTINUES:
            self.pos = pos + 1  # fast path: a plain one-word type such as `f32` or `T`
            span = Span(self.file, self.starts[pos], self.ends[pos])
            return ast.NamedType((ast.Ident(self.texts[pos], span),), None, span)
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        text = self.texts[pos]
        base: ast.Type
        if self.is_name(pos):
            if text == "Tensor" and self.texts[pos + 1] == "[":  # 3.3 rule 12
                base = self.tensor_type()
            else:
                base = self.named_type()
        elif text == "(":
            base = self.tuple_type()
        elif text == "[":
            base = self.array_type()
        else:
            raise self.expected("a type")
        if self.texts[self.pos] == "?":
            base = ast.OptionalType(base, self.span(base.span.start, self.ends[self.pos]))
            self.pos += 1
        self.depth -= 1
        return base

    def named_type(self, what: str = "a type") -> ast.NamedType:
        """NamedType ::= Path GenArgs?"""
        path = [self.ident(what)]
        while self.texts[self.pos] == ".":
            self.pos += 1
            path.append(self.ident("a type name"))
        args = None
        if self.texts[self.pos] == "<":
            args = self.gen_args()
        return ast.NamedType(tuple(path), args, self.span(path[0].span.start, self.prev_end()))

    def tensor_type(self) -> ast.Type:
        """TensorType ::= 'Tensor' '[' DimItem (',' DimItem)* ';' ElemType ']'"""
        start = self.starts[self.pos]
        self.pos += 2
        texts = self.texts
        if texts[self.pos] == ";":
            self.pos += 1
            elem = self.named_type("an element type such as `f32`")
            end = self.expect("]")
            self.report(
                "E1103",
                "rank-zero tensor types are reserved; use a scalar",
                self.span(start, end),
                "a tensor type needs at least one dimension",
                help=(f"use the scalar type `{elem.span.text}` instead of a rank-0 tensor",),
            )
            return elem
        dims: list[ast.Expr | ast.PackRef] = []
        while True:
            if texts[self.pos] == "*":
                star = self.starts[self.pos]
                self.pos += 1
                name = self.ident("a shape pack name")
                dims.append(ast.PackRef(name, self.span(star, name.span.end)))
            else:
                dims.append(self.expr())
            sep = texts[self.pos]
            if sep == ";":
                break
            if sep == "]":
                raise self.expected(
                    "`,` or `;`", help=("a tensor type ends with its dtype: `Tensor[N, M; f32]`",)
                )
            if sep != ",":
                raise self.expected("`,` or `;`")
            self.pos += 1
            if texts[self.pos] == ";":
                raise self.fail(
                    "expected a dimension, found `;`",
                    label="expected a dimension",
                    notes=("a trailing comma is not allowed before `;` in a tensor type",),
                )
        self.pos += 1
        elem = self.named_type("an element type such as `f32`")
        end = self.expect("]")
        return ast.TensorType(tuple(dims), elem, self.span(start, end))

    def tuple_type(self) -> ast.Type:
        """TupleType ::= '(' Type ',' (Type (',' Type)* ','?)? ')'; `(T)` is T."""
        start = self.starts[self.pos]
        self.pos += 1
        first = self.type_()
        if self.texts[self.pos] == ")":
            self.pos += 1
            return first
        elems = [first]
        trailing = False
        while self.texts[self.pos] == ",":
            self.pos += 1
            trailing = True
            if self.texts[self.pos] == ")":
                break
            elems.append(self.type_())
            trailing = False
        end = self.expect(")")
        return ast.TupleType(tuple(elems), trailing, self.span(start, end))

    def array_type(self) -> ast.ArrayType:
        """ArrayType ::= '[' Type ';' Expr ']'"""
        start = self.starts[self.pos]
        self.pos += 1
        elem = self.type_()
        self.expect(";")
        length = self.expr()
        end = self.expect("]")
        return ast.ArrayType(elem, length, self.span(start, end))

    # ============================================================ generic arguments

    def gen_args(self) -> tuple[ast.GenArg, ...]:
        """GenArgs ::= '<' GenArg (',' GenArg)* ','? '>' (nesting counts toward the limit)"""
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        self.pos += 1
        args = [self.gen_arg()]
        while self.texts[self.pos] == ",":
            self.pos += 1
            if self.texts[self.pos] == ">":
                break
            args.append(self.gen_arg())
        if self.texts[self.pos] != ">":
            raise self.expected("`,` or `>`")
        self.pos += 1
        self.depth -= 1
        return tuple(args)

    def gen_arg(self) -> ast.GenArg:
        """3.3 rule 2: a Type followed by `,` or `>`, else an AddExpr (rule 15:
        `[B, S]` fails as an array type and becomes a shape literal)."""
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind is IDENT and self.texts[pos + 1] in _GEN_ARG_END:
            self.pos = pos + 1
            span = self.token_span(pos)
            return ast.NamedType((ast.Ident(text, span),), None, span)
        if kind is IDENT or kind is RESERVED_WORD or text == "(" or text == "[":
            memo = self.type_memo.get(pos)
            if memo is None:
                found = self.speculate(self._type_then_end)
                memo = FAILED if found is None else (found, self.pos)
                self.type_memo[pos] = memo
            if memo is not FAILED:
                found_type, end = cast(tuple[ast.Type, int], memo)
                self.pos = end
                return found_type
        return self.binary(ADD_PRECEDENCE)

    def _type_then_end(self) -> ast.Type:
        found = self.type_()
        if self.texts[self.pos] not in _GEN_ARG_END:
            raise Backtrack
        return found

    def try_generic_call(self) -> tuple[ast.GenArg, ...] | None:
        """3.3 rule 1: `<` after a name starts GenArgs only if they parse completely
        and are followed by `(`; otherwise it is less-than. Memoised per position."""
        pos = self.pos
        memo = self.generic_memo.get(pos)
        if memo is None:
            found = self.speculate(self._gen_args_then_paren)
            memo = FAILED if found is None else (found, self.pos)
            self.generic_memo[pos] = memo
        if memo is FAILED:
            return None
        args, end = cast(tuple[tuple[ast.GenArg, ...], int], memo)
        self.pos = end
        return args

    def _gen_args_then_paren(self) -> tuple[ast.GenArg, ...]:
        args = self.gen_args()
        if self.texts[self.pos] != "(":
            raise Backtrack
        return args

    # ============================================================ expressions

    def root_expr(self) -> ast.Expr:
        """An expression in a declaration or statement (its height is checked)."""
        start = self.pos
        result = self.expr()
        self.check_height(result, start)
        return result

    def expr(self) -> ast.Expr:
        """Expr ::= IfExpr | MatchExpr | OrExpr"""
        pos = self.pos
        kind = self.kinds[pos]
        if (kind is IDENT or kind is INT) and self.texts[pos + 1] not in _CONTINUES:
            # Fast path: a lone name or integer (most dimensions, indices, arguments).
            # A reduction word followed by `[` or `<` does not take it.
            self.pos = pos + 1
            text = self.texts[pos]
            span = Span(self.file, self.starts[pos], self.ends[pos])
            if kind is IDENT:
                return ast.Name(ast.Ident(text, span), span)
            return ast.IntLit(text, int_value(text), span)
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        text = self.texts[self.pos]
        result: ast.Expr
        if text == "if":
            result = self.if_expr()
        elif text == "match":
            result = self.match_expr()
        elif text == "for":
            result = self.for_loop()
        else:
            result = self.binary(1)
        self.depth -= 1
        return result

    def binary(self, min_precedence: int) -> ast.Expr:
        """OrExpr .. MulExpr by precedence climbing (7.4: all left-associative)."""
        left = self.operand()
        texts = self.texts
        precedence_of = BINARY_PRECEDENCE.get
        while True:
            pos = self.pos
            op = texts[pos]
            precedence = precedence_of(op)
            if precedence is None or precedence < min_precedence:
                return left
            self.pos = pos + 1
            right = self.binary(precedence + 1)
            op_start = self.starts[pos]
            left = ast.Binary(
                cast(ast.BinaryOp, op),
                left,
                right,
                Span(self.file, op_start, op_start + len(op)),
                Span(self.file, left.span.start, right.span.end),
            )

    def operand(self) -> ast.Expr:
        """Prefixed ::= ('!' | '-' | '+')? Postfix (3.3 rule 10: at most one)."""
        pos = self.pos
        op = self.texts[pos]
        if self.kinds[pos] is IDENT and self.texts[pos + 1] not in _POSTFIX_STARTS:
            self.pos = pos + 1  # fast path: a plain name (not a reduction: no `[`/`<`)
            span = Span(self.file, self.starts[pos], self.ends[pos])
            return ast.Name(ast.Ident(op, span), span)
        if op not in _PREFIX:
            return self.postfix()
        self.pos = pos + 1
        if self.texts[pos + 1] in _PREFIX:
            self.report(
                "E1101",
                f"expected an expression, found `{self.texts[pos + 1]}`",
                self.token_span(pos + 1),
                "a second prefix operator",
                notes=("an operand takes at most one prefix operator",),
                help=(f"use parentheses: `{op}({self.texts[pos + 1]}x)`",),
            )
            if self.depth >= MAX_DEPTH:
                raise self.too_deep()
            self.depth += 1
            inner = self.operand()
            self.depth -= 1
        else:
            inner = self.postfix()
        return ast.Unary(
            cast(ast.UnaryOp, op), inner, Span(self.file, self.starts[pos], inner.span.end)
        )

    def postfix(self) -> ast.Expr:
        """Postfix ::= Primary Suffix*"""
        result = self.primary()
        # 3.3 rule 1: a generic call only after a name or a dotted member chain.
        is_path = type(result) is ast.Name
        texts = self.texts
        count = 0
        while True:
            text = texts[self.pos]
            if text == "(":
                result = self.call(result, None)
                is_path = False
            elif text == ".":
                self.pos += 1
                name = self.ident("a member name")
                result = ast.Member(result, name, Span(self.file, result.span.start, name.span.end))
            elif text == "[":
                result = self.index(result)
                is_path = False
            elif text == "<" and is_path:
                generic_args = self.try_generic_call()
                if generic_args is None:
                    return result
                result = self.call(result, generic_args)
                is_path = False
            else:
                return result
            count += 1
            if count > MAX_DEPTH:
                raise self.too_deep()

    def call(self, callee: ast.Expr, generic_args: tuple[ast.GenArg, ...] | None) -> ast.Call:
        """Call ::= '(' (Arg (',' Arg)* ','?)? ')'"""
        self.pos += 1
        texts = self.texts
        args: list[ast.Arg] = []
        trailing = False
        while texts[self.pos] != ")":
            args.append(self.arg())
            if texts[self.pos] == ",":
                self.pos += 1
                trailing = True
            elif texts[self.pos] == ")":
                trailing = False
            else:
                raise self.expected("`,` or `)`")
        end = self.ends[self.pos]
        self.pos += 1
        return ast.Call(
            callee, generic_args, tuple(args), trailing, Span(self.file, callee.span.start, end)
        )

    def arg(self) -> ast.Arg:
        """Arg ::= (IDENT '=')? Expr"""
        pos = self.pos
        if self.is_name(pos) and self.texts[pos + 1] == "=":
            name = self.ident("an argument name")
            self.pos += 1
            value = self.expr()
            return ast.Arg(name, value, Span(self.file, name.span.start, value.span.end))
        value = self.expr()
        return ast.Arg(None, value, value.span)

    def index(self, target: ast.Expr) -> ast.Index:
        """Index ::= '[' Component (',' Component)* ']'"""
        self.pos += 1
        components = [self.component()]
        while self.texts[self.pos] == ",":
            self.pos += 1
            components.append(self.component())
        if self.texts[self.pos] != "]":
            raise self.expected("`,` or `]`")
        end = self.ends[self.pos]
        self.pos += 1
        return ast.Index(target, tuple(components), Span(self.file, target.span.start, end))

    def component(self) -> ast.Component:
        """Component ::= '...' | '*' IDENT | Expr | Slice (3.3 rule 13)."""
        pos = self.pos
        text = self.texts[pos]
        if text == "...":
            self.pos = pos + 1
            return ast.EllipsisComponent(self.token_span(pos))
        if text == "*":
            self.pos = pos + 1
            name = self.ident("a pack index name")
            return ast.PackIndex(name, self.span(self.starts[pos], name.span.end))
        if text == "]" or text == ",":
            raise self.expected("an index or a slice")
        start: ast.Expr | None = None
        if text != ":" and text != "::":
            start = self.expr()
            text = self.texts[self.pos]
            if text != ":" and text != "::":
                return start
        begin = start.span.start if start is not None else self.starts[self.pos]
        self.pos += 1
        stop: ast.Expr | None = None
        step: ast.Expr | None = None
        has_step = text == "::"
        if not has_step:
            if self.texts[self.pos] not in _STOP_END:
                stop = self.expr()
            if self.texts[self.pos] == ":":
                self.pos += 1
                has_step = True
        if has_step and self.texts[self.pos] not in _SLICE_END:
            step = self.expr()
        return ast.Slice(start, stop, step, has_step, self.span(begin, self.prev_end()))

    def primary(self) -> ast.Expr:
        """Primary: literals, names, reductions, `some(..)`, `none`, parentheses,
        tuples and shape literals."""
        pos = self.pos
        kind = self.kinds[pos]
        text = self.texts[pos]
        if kind is IDENT:
            if text in REDUCTION_WORDS and self._starts_reduction(pos):
                return self.reduction()
            self.pos = pos + 1
            span = Span(self.file, self.starts[pos], self.ends[pos])
            return ast.Name(ast.Ident(text, span), span)
        if kind is INT:
            self.pos = pos + 1
            return ast.IntLit(text, int_value(text), self.token_span(pos))
        if kind is FLOAT:
            self.pos = pos + 1
            return ast.FloatLit(text, float_value(text), self.token_span(pos))
        if kind is STRING:
            self.pos = pos + 1
            return ast.StringLit(text, string_value(text), self.token_span(pos))
        if text == "(":
            return self.paren_or_tuple()
        if text == "[":
            return self.shape_literal()
        if kind is KEYWORD:
            return self.keyword_primary(pos, text)
        if kind is RESERVED_WORD:
            self.reserved_word(pos)
            self.pos = pos + 1
            span = self.token_span(pos)
            return ast.Name(ast.Ident(text, span), span)
        raise self.expected("an expression")

    def keyword_primary(self, pos: int, text: str) -> ast.Expr:
        if text == "true" or text == "false":
            self.pos = pos + 1
            return ast.BoolLit(text == "true", self.token_span(pos))
        if text == "none":
            self.pos = pos + 1
            return ast.NoneLit(self.token_span(pos))
        if text == "some":
            self.pos = pos + 1
            self.expect("(")
            value = self.expr()
            end = self.expect(")")
            return ast.SomeExpr(value, self.span(self.starts[pos], end))
        if text == "if" or text == "match" or text == "for":
            # 3.3 rule 8 (a `for`: language-extensions rule 16): not an operand.
            # Report, then parse it to stay in step.
            help_ = (
                "bind the loop first: `let ys = for ...`"
                if text == "for"
                else f"wrap it in parentheses: `({text} ...)`"
            )
            self.report(
                "E1101",
                f"expected an operand, found keyword `{text}`",
                self.token_span(pos),
                f"`{text}` cannot be an operand",
                notes=(f"`{text}` expressions are not operands of operators",),
                help=(help_,),
            )
            return self.expr()
        if text == "self" and self.texts[pos + 1] == ".":
            raise self.expected(
                "an expression",
                help=(
                    "there is no `self`: inside a block its members are bare names "
                    f"(`{self.texts[pos + 2]}`)",
                ),
            )
        raise self.expected("an expression")

    def paren_or_tuple(self) -> ast.Expr:
        """3.3 rule 11: `( Expr )` is parenthesised; a comma makes a tuple."""
        start = self.starts[self.pos]
        self.pos += 1
        first = self.expr()
        texts = self.texts
        if texts[self.pos] == ")":
            end = self.ends[self.pos]
            self.pos += 1
            return ast.Paren(first, self.span(start, end))
        if texts[self.pos] != ",":
            raise self.expected("`,` or `)`")
        elems = [first]
        trailing = False
        while texts[self.pos] == ",":
            self.pos += 1
            trailing = True
            if texts[self.pos] == ")":
                break
            elems.append(self.expr())
            trailing = False
        end = self.expect(")")
        return ast.TupleExpr(tuple(elems), trailing, self.span(start, end))

    def shape_literal(self) -> ast.ShapeLit:
        """'[' (Expr (',' Expr)* ','?)? ']'"""
        start = self.starts[self.pos]
        self.pos += 1
        texts = self.texts
        elems: list[ast.Expr] = []
        trailing = False
        while texts[self.pos] != "]":
            elems.append(self.expr())
            if texts[self.pos] == ",":
                self.pos += 1
                trailing = True
            elif texts[self.pos] == "]":
                trailing = False
            else:
                raise self.expected("`,` or `]`")
        end = self.ends[self.pos]
        self.pos += 1
        return ast.ShapeLit(tuple(elems), trailing, self.span(start, end))

    def _starts_reduction(self, pos: int) -> bool:
        """3.3 rule 3: a reduction word followed by `[`, or by `<` DType `>` `[`."""
        texts = self.texts
        following = texts[pos + 1]
        if following == "[":
            return True
        return (
            following == "<"
            and self.is_name(pos + 2)
            and texts[pos + 3] == ">"
            and texts[pos + 4] == "["
        )

    def reduction(self) -> ast.Reduction:
        """Reduction ::= RedWord ('<' DTypeName '>')? '[' IDENT (',' IDENT)* ']' Expr"""
        pos = self.pos
        kind_span = self.token_span(pos)
        accumulator = None
        self.pos = pos + 1
        if self.texts[self.pos] == "<":
            self.pos += 1
            name = self.ident("a dtype")
            accumulator = ast.NamedType((name,), None, name.span)
            self.pos += 1  # `>`, checked by _starts_reduction
        self.expect("[")
        indices = [self.ident("an index name")]
        while self.texts[self.pos] == ",":
            self.pos += 1
            indices.append(self.ident("an index name"))
        self.expect("]")
        body = self.expr()  # 3.3 rule 14: the body extends as far right as it can
        return ast.Reduction(
            cast(ast.ReductionKind, self.texts[pos]),
            kind_span,
            accumulator,
            tuple(indices),
            body,
            self.span(kind_span.start, body.span.end),
        )

    def if_expr(self) -> ast.IfExpr:
        """IfExpr ::= 'if' Expr '{' Expr '}' 'else' '{' Expr '}'"""
        start = self.starts[self.pos]
        self.pos += 1
        cond = self.expr()
        self.expect("{")
        then = self.expr()
        self.expect("}")
        if self.texts[self.pos] != "else":
            raise self.expected("`else`", notes=("an `if` expression needs both branches",))
        self.pos += 1
        otherwise: ast.Expr
        if self.texts[self.pos] == "if":
            # 3.3 rule 9: no `else if`. Report, then read the nested `if` anyway.
            self.report(
                "E1101",
                "expected `{`, found keyword `if`",
                self.token_span(self.pos),
                "`else if` is not supported",
                notes=("`else` is always followed by a braced expression",),
                help=("nest the `if` inside the else branch: `else { if c { a } else { b } }`",),
            )
            otherwise = self.expr()
            end = otherwise.span.end
        else:
            self.expect("{")
            otherwise = self.expr()
            end = self.expect("}")
        return ast.IfExpr(cond, then, otherwise, self.span(start, end))

    def for_loop(self) -> ast.ForLoop:
        """ForLoop (language-extensions 0.2); the statement parser, which reads bodies, has it."""
        raise self.expected("an expression")

    def match_expr(self) -> ast.MatchExpr:
        """MatchExpr ::= 'match' Expr '{' Arm+ '}'"""
        start = self.starts[self.pos]
        self.pos += 1
        scrutinee = self.expr()
        self.expect("{")
        arms: list[ast.Arm] = []
        while self.texts[self.pos] != "}":
            arms.append(self.arm())
        if not arms:
            self.report(
                "E1101",
                "expected a match arm, found `}`",
                self.token_span(self.pos),
                "a `match` needs at least one arm",
            )
        end = self.ends[self.pos]
        self.pos += 1
        return ast.MatchExpr(scrutinee, tuple(arms), self.span(start, end))

    def arm(self) -> ast.Arm:
        """Arm ::= ArmPattern '=>' Expr; ArmPattern ::= IDENT | some(..) | none."""
        pos = self.pos
        text = self.texts[pos]
        if text == "(":
            # 3.3 rule 7: arms have no separator, so `(` would continue the previous arm.
            self.report(
                "E1101",
                "expected a match arm pattern, found `(`",
                self.token_span(pos),
                "a tuple pattern cannot start an arm",
                notes=("match arms have no separator, so an arm cannot begin with `(`",),
                help=("bind the value with a name and destructure it with `let`",),
            )
        elif not (self.is_name(pos) or text == "some" or text == "none"):
            raise self.expected("a match arm pattern")
        pattern = self.pattern()
        self.expect("=>")
        value = self.expr()
        return ast.Arm(pattern, value, self.span(pattern.span.start, value.span.end))

    # ============================================================ patterns

    def pattern(self) -> ast.Pattern:
        """Pattern ::= IDENT | '(' Pattern (',' Pattern)* ','? ')' | some(..) | none"""
        pos = self.pos
        text = self.texts[pos]
        if text == "(":
            return self.tuple_pattern()
        if text == "some":
            self.pos = pos + 1
            self.expect("(")
            if self.depth >= MAX_DEPTH:
                raise self.too_deep()
            self.depth += 1
            inner = self.pattern()
            self.depth -= 1
            end = self.expect(")")
            return ast.SomePattern(inner, self.span(self.starts[pos], end))
        if text == "none":
            self.pos = pos + 1
            return ast.NonePattern(self.token_span(pos))
        name = self.ident("a pattern")
        return ast.NamePattern(name, name.span)

    def tuple_pattern(self) -> ast.Pattern:
        """`(p)` is just `p`, like `(T)` and `(e)`; a comma makes a tuple pattern."""
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        start = self.starts[self.pos]
        self.pos += 1
        first = self.pattern()
        texts = self.texts
        if texts[self.pos] == ")":
            self.pos += 1
            self.depth -= 1
            return first
        elems = [first]
        trailing = False
        while texts[self.pos] == ",":
            self.pos += 1
            trailing = True
            if texts[self.pos] == ")":
                break
            elems.append(self.pattern())
            trailing = False
        end = self.expect(")")
        self.depth -= 1
        return ast.TuplePattern(tuple(elems), trailing, self.span(start, end))
