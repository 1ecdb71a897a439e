"""The parser against language.md section 3: productions, deciding rules (3.3),
syntax errors (3.4), recovery, spans, and robustness on arbitrary input.

Expression shapes are asserted through `sexpr`, a compact S-expression view:
`a + b * c` is `(+ a (* b c))`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linnet.diagnostics import CODES, Diagnostic
from linnet.source import SourceFile, Span
from linnet.syntax import ast
from linnet.syntax.parser import dump_ast, parse, parse_text
from linnet.syntax.tokens import KEYWORDS, PUNCTUATION

DOCS = Path("/work/shared/docs/language.md")
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- helpers


def parse_ok(text: str) -> ast.File:
    tree, diagnostics = parse_text(text)
    assert diagnostics == [], [(d.code, d.message) for d in diagnostics]
    assert tree is not None
    return tree


def errors(text: str) -> list[tuple[str, str]]:
    """(code, text under the primary span) of every diagnostic."""
    _, diagnostics = parse_text(text)
    return [(d.code, d.span.text if d.span else "") for d in diagnostics]


def diagnostics(text: str) -> list[Diagnostic]:
    return parse_text(text)[1]


def body(statements: str) -> tuple[ast.Stmt, ...]:
    tree = parse_ok(f"module m\nfn f() {{\n{statements}\n}}\n")
    fn = tree.items[0]
    assert isinstance(fn, ast.FnDecl)
    return fn.body.stmts


def expr(source: str) -> ast.Expr:
    (stmt,) = body(f"let it = {source}")
    assert isinstance(stmt, ast.LetStmt)
    return stmt.value


def type_of(source: str) -> ast.Type:
    (stmt,) = body(f"let it: {source} = 0")
    assert isinstance(stmt, ast.LetStmt) and stmt.type is not None
    return stmt.type


def sexpr(node: object) -> str:
    """A compact structural rendering of expressions, types and patterns."""
    s = sexpr
    match node:
        case None:
            return "_"
        case ast.Name(ident=ident):
            return ident.name
        case ast.IntLit(text=text) | ast.FloatLit(text=text) | ast.StringLit(text=text):
            return text
        case ast.BoolLit(value=value):
            return "true" if value else "false"
        case ast.NoneLit() | ast.NonePattern():
            return "none"
        case ast.Paren(inner=inner):
            return f"(paren {s(inner)})"
        case ast.Unary(op=op, operand=operand):
            return f"(u{op} {s(operand)})"
        case ast.Binary(op=op, left=left, right=right):
            return f"({op} {s(left)} {s(right)})"
        case ast.Call(callee=callee, generic_args=gargs, args=args):
            generic = "" if gargs is None else "<" + " ".join(s(g) for g in gargs) + ">"
            rendered = [(f"{a.name.name}=" if a.name else "") + s(a.value) for a in args]
            return f"(call {s(callee)}{generic}" + "".join(" " + r for r in rendered) + ")"
        case ast.Member(target=target, name=name):
            return f"(. {s(target)} {name.name})"
        case ast.Index(target=target, components=components):
            return f"(idx {s(target)} " + " ".join(s(c) for c in components) + ")"
        case ast.Slice(start=start, stop=stop, step=step, has_step=has_step):
            return f"{s(start)}:{s(stop)}" + (f":{s(step)}" if has_step else "")
        case ast.EllipsisComponent():
            return "..."
        case ast.PackIndex(name=name) | ast.PackRef(name=name):
            return f"*{name.name}"
        case ast.TupleExpr(elems=elems):
            return "(tuple " + " ".join(s(e) for e in elems) + ")"
        case ast.SomeExpr(value=value) | ast.SomePattern(inner=value):
            return f"(some {s(value)})"
        case ast.ShapeLit(elems=elems):
            return "[" + " ".join(s(e) for e in elems) + "]"
        case ast.Reduction(kind=kind, accumulator=acc, indices=indices, body=reduced):
            accumulated = "" if acc is None else f"<{s(acc)}>"
            names = " ".join(i.name for i in indices)
            return f"({kind}{accumulated}[{names}] {s(reduced)})"
        case ast.IfExpr(cond=cond, then=then, otherwise=otherwise):
            return f"(if {s(cond)} {s(then)} {s(otherwise)})"
        case ast.MatchExpr(scrutinee=scrutinee, arms=arms):
            arm_text = " ".join(f"({s(a.pattern)} => {s(a.value)})" for a in arms)
            return f"(match {s(scrutinee)} {arm_text})"
        case ast.NamedType(path=path, args=args):
            dotted = ".".join(p.name for p in path)
            return dotted + ("" if args is None else "<" + " ".join(s(a) for a in args) + ">")
        case ast.TensorType(dims=dims, elem=elem):
            return "Tensor[" + " ".join(s(d) for d in dims) + f"; {s(elem)}]"
        case ast.TupleType(elems=elems):
            return "(ttuple " + " ".join(s(e) for e in elems) + ")"
        case ast.ArrayType(elem=elem, length=length):
            return f"[{s(elem)}; {s(length)}]"
        case ast.OptionalType(inner=inner):
            return f"{s(inner)}?"
        case ast.NamePattern(name=name):
            return name.name
        case ast.TuplePattern(elems=elems):
            return "(ptuple " + " ".join(s(e) for e in elems) + ")"
    raise AssertionError(f"no rendering for {node!r}")


def all_nodes(root: object) -> list[object]:
    found = []
    stack = [root]
    while stack:
        node = stack.pop()
        found.append(node)
        for name in ast.node_fields(node):
            value = getattr(node, name)
            values = value if isinstance(value, tuple) else (value,)
            stack.extend(v for v in values if ast.is_node(v))
    return found


def assert_spans_exact(tree: ast.File) -> None:
    """Every node's span is trimmed source text containing its children's spans."""
    for node in all_nodes(tree):
        span = node.span  # type: ignore[attr-defined]
        if node is tree:
            continue
        assert span.text == span.text.strip(), (type(node).__name__, span.text)
        assert span.text, type(node).__name__
        for name in ast.node_fields(node):
            value = getattr(node, name)
            for child in value if isinstance(value, tuple) else (value,):
                child_span = getattr(child, "span", None)
                if isinstance(child_span, Span):
                    assert span.start <= child_span.start <= child_span.end <= span.end, (
                        type(node).__name__,
                        type(child).__name__,
                    )
        if isinstance(node, ast.Binary):
            assert span.start == node.left.span.start and span.end == node.right.span.end
            assert node.op_span.text == node.op
        if isinstance(node, (ast.Call, ast.Params)):
            assert span.text.endswith(")")
        if isinstance(node, ast.Body):
            assert span.text.startswith("{") and span.text.endswith("}")
        if isinstance(node, ast.BlockDecl):
            assert node.body_span.text.startswith("{") and node.body_span.text.endswith("}")
            assert span.end == node.body_span.end
        if isinstance(node, (ast.Index, ast.ShapeLit)):
            assert span.text.endswith("]")


def doc_blocks() -> list[str]:
    return re.findall(r"```linnet\n(.*?)```", DOCS.read_text(), re.S)


# ---------------------------------------------------------------- whole files


def test_every_linnet_block_of_the_language_reference_parses() -> None:
    blocks = doc_blocks()
    assert len(blocks) >= 15
    for index, block in enumerate(blocks):
        tree, found = parse_text(block, f"language.md block {index}")
        assert found == [], (index, [(d.code, d.message) for d in found])
        assert tree is not None and tree.module
        assert_spans_exact(tree)


@pytest.mark.parametrize(
    "path",
    [*sorted((ROOT / "stdlib").rglob("*.linnet")), ROOT / "examples/tiny/src/lib.linnet"],
    ids=lambda p: p.name,
)
def test_shipped_sources_parse(path: Path) -> None:
    tree, found = parse(SourceFile.read(path))
    assert found == [], [(d.code, d.message) for d in found]
    assert tree is not None
    assert_spans_exact(tree)


def test_file_structure_and_use_forms() -> None:
    tree = parse_ok(
        "module a.b.c\n"
        "use std.nn.linear::{linear, Linear as L,}\n"
        "use crate.x::y\n"
        "use std.random\n"
        "pub const N: i64 = 4\n"
        "type Alias<T: Float> = Tensor[N; T]\n"
    )
    assert tree.module_name == "a.b.c" and tree.module_span.text == "module a.b.c"
    first, second, third = tree.uses
    assert [p.name for p in first.path] == ["std", "nn", "linear"]
    assert first.braced and first.trailing_comma and first.items is not None
    assert [(i.name.name, i.alias.name if i.alias else None) for i in first.items] == [
        ("linear", None),
        ("Linear", "L"),
    ]
    assert first.items[1].bound_name.name == "L"
    assert [p.name for p in second.path] == ["crate", "x"] and not second.braced
    assert second.items is not None and second.items[0].name.name == "y"
    assert third.items is None and third.span.text == "use std.random"
    const, alias = tree.items
    assert isinstance(const, ast.ConstDecl) and const.pub and sexpr(const.type) == "i64"
    assert isinstance(alias, ast.AliasDecl) and sexpr(alias.type) == "Tensor[N; T]"
    assert tree.span.start == 0 and tree.span.end == len(tree.span.file.text)


def test_declarations() -> None:
    tree = parse_ok(
        """module m
struct Pair<T: DType> {
    first: T
    second: T
}
enum Mode { A, B, }
enum Empty {}
pub op f<*S: Shape, N: Dim = 2 * B, T: Float = bf16, D: Shape = [B, S],>(
    x: Tensor[*S, N; T],
    k: i32 = 3,
) -> Tensor[*S, N; T]
where
    N > 0,
    N % 2 == 0,
{
    return x
}
entry e() {}
pub block B<H: Dim> where H > 0 {
    param w: Tensor[H; f32]
    param b: Tensor[H; f32]? = none
    buffer stats: Tensor[H; f32]
    state s: Tensor[H; f32]
    sub kids: [Child<H>; 3]
    sub extra: Child<H>? = none
    pub fn forward(x: f32) -> f32 {
        return x
    }
    const LOCAL = 1
}
"""
    )
    struct, mode, empty, op, entry, block = tree.items
    assert isinstance(struct, ast.StructDecl)
    assert [(f.name.name, sexpr(f.type)) for f in struct.fields] == [
        ("first", "T"),
        ("second", "T"),
    ]
    assert isinstance(mode, ast.EnumDecl) and mode.trailing_comma
    assert [v.name for v in mode.variants] == ["A", "B"]
    assert isinstance(empty, ast.EnumDecl) and empty.variants == ()
    assert isinstance(op, ast.FnDecl) and op.kind == "op" and op.pub
    assert op.generics is not None and op.generics.trailing_comma
    assert [(g.name.name, g.is_pack, g.kind, sexpr(g.default) if g.default else None)
            for g in op.generics.params] == [
        ("S", True, "Shape", None), ("N", False, "Dim", "(* 2 B)"),
        ("T", False, "Float", "bf16"), ("D", False, "Shape", "[B S]"),
    ]  # fmt: skip
    assert op.params.trailing_comma and [p.name.name for p in op.params.params] == ["x", "k"]
    assert sexpr(op.params.params[1].default) == "3"
    assert op.where is not None and op.where.trailing_comma
    assert [sexpr(r) for r in op.where.relations] == ["(> N 0)", "(== (% N 2) 0)"]
    assert isinstance(entry, ast.FnDecl) and entry.kind == "entry" and entry.result is None
    assert isinstance(block, ast.BlockDecl) and block.where is not None
    kinds = [(p.kind, p.name.name) if isinstance(p, ast.MemberDecl) else type(p).__name__
             for p in block.parts]  # fmt: skip
    assert kinds == [("param", "w"), ("param", "b"), ("buffer", "stats"), ("state", "s"),
                     ("sub", "kids"), ("sub", "extra"), "FnDecl", "ConstDecl"]  # fmt: skip
    assert sexpr(block.parts[4].type) == "[Child<H>; 3]"  # type: ignore[union-attr]
    assert block.body_span.text.startswith("{\n    param w")
    assert_spans_exact(tree)


def test_statements() -> None:
    stmts = body(
        """let a = 1
let b: Tensor[N; f32] = x
let (c, (d, _),) = t
let y[*l, o] = sum[i] x[*l, i]
var h: i32 = 0
h = h + 1
static for layer in layers {
    h = layer.forward(h)
}
static for i in 1..Steps + 1 {}
while going && steps < max_steps {
    steps = steps + 1
}
return (a, b)"""
    )
    let_a, let_b, let_t, comp, var, assign, loop, ranged, while_, ret = stmts
    assert isinstance(let_a, ast.LetStmt) and let_a.type is None
    assert isinstance(let_b, ast.LetStmt) and sexpr(let_b.type) == "Tensor[N; f32]"
    assert isinstance(let_t, ast.LetStmt) and sexpr(let_t.pattern) == "(ptuple c (ptuple d _))"
    assert isinstance(let_t.pattern, ast.TuplePattern) and let_t.pattern.trailing_comma
    assert isinstance(comp, ast.ComprehensionStmt)
    assert [(i.name.name, i.is_pack) for i in comp.indices] == [("l", True), ("o", False)]
    assert isinstance(var, ast.VarStmt) and sexpr(var.type) == "i32"
    assert isinstance(assign, ast.AssignStmt) and assign.target.name == "h"
    assert isinstance(loop, ast.StaticForStmt) and loop.stop is None and len(loop.body.stmts) == 1
    assert isinstance(ranged, ast.StaticForStmt) and sexpr(ranged.iter) == "1"
    assert sexpr(ranged.stop) == "(+ Steps 1)"
    assert isinstance(while_, ast.WhileStmt)
    assert sexpr(while_.cond) == "(&& going (< steps max_steps))"
    assert isinstance(ret, ast.ReturnStmt) and sexpr(ret.value) == "(tuple a b)"


# ---------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    ("source", "shape"),
    [
        ("a || b && c", "(|| a (&& b c))"),
        ("a == b != c", "(!= (== a b) c)"),
        ("mask & x > 0", "(> (& mask x) 0)"),
        ("a | b ^ c & d", "(| a (^ b (& c d)))"),
        ("a + b * c - d / e % f", "(- (+ a (* b c)) (% (/ d e) f))"),
        ("a < b < c", "(< (< a b) c)"),
        ("-x * y", "(* (u- x) y)"),
        ("!a == b", "(== (u! a) b)"),
        ("+x.y[0]", "(u+ (idx (. x y) 0))"),
        ("(a + b) * c", "(* (paren (+ a b)) c)"),
        ("(a,)", "(tuple a)"),
        ("(a, b,)", "(tuple a b)"),
        ("some((a, b))", "(some (tuple a b))"),
        ("none", "none"),
        ("true != false", "(!= true false)"),
        ('"text"', '"text"'),
        ("[]", "[]"),
        ("[B, S * H,]", "[B (* S H)]"),
        ("f(x, axis = -1)", "(call f x axis=(u- 1))"),
        ("m.f(x)(y)", "(call (call (. m f) x) y)"),
        ("layers[2].norm.weight", "(. (. (idx layers 2) norm) weight)"),
        ("if c { a } else { b + 1 }", "(if c a (+ b 1))"),
        (
            "match v { some(b) => b none => 0 X => y }",
            "(match v ((some b) => b) (none => 0) (X => y))",
        ),
        ("1.5e3 * 0xff", "(* 1.5e3 0xff)"),
    ],
)
def test_expression_shapes(source: str, shape: str) -> None:
    assert sexpr(expr(source)) == shape


# 3.3 rule 1 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "shape"),
    [
        ("cast<f32>(x)", "(call cast<f32> x)"),
        ("random.normal<N, f32>(k)", "(call (. random normal)<N f32> k)"),
        ("a.b.c<T>(x)", "(call (. (. a b) c)<T> x)"),
        ("a < b && c > (d)", "(&& (< a b) (> c (paren d)))"),
        ("a < b", "(< a b)"),
        ("a < b > c", "(> (< a b) c)"),
        ("f<A>(x) < g", "(< (call f<A> x) g)"),
        ("x < y > (z)", "(call x<y> z)"),
        ("f(x)<T>(y)", "(> (< (call f x) T) (paren y))"),
        ("to_groups<Rows, 8 * C, 8>(x)", "(call to_groups<Rows (* 8 C) 8> x)"),
        (
            "f<[B, S], Tensor[B; f32], (A, B), [L<H>; N], T?>()",
            "(call f<[B S] Tensor[B; f32] (ttuple A B) [L<H>; N] T?>)",
        ),
        ("mask<S>()", "(call mask<S>)"),
        ("f<H / 2, (a < b),>(x)", "(call f<(/ H 2) (paren (< a b))> x)"),
    ],
)
def test_rule_1_generic_call_or_comparison(source: str, shape: str) -> None:
    assert sexpr(expr(source)) == shape


def test_rule_2_generic_argument_is_type_first_then_add_expr() -> None:
    call = expr("f<H, linear.Linear<H, H>, 2 * H, -N, H + 1>(x)")
    assert isinstance(call, ast.Call) and call.generic_args is not None
    assert [type(a).__name__ for a in call.generic_args] == [
        "NamedType", "NamedType", "Binary", "Unary", "Binary",
    ]  # fmt: skip
    # Comparisons are not generic arguments: the `<` stays a less-than.
    assert sexpr(expr("f<a == b>(x)")) == "(== (< f a) (> b (paren x)))"


def test_rule_3_reduction_words() -> None:
    assert sexpr(expr("sum[i] x[i]")) == "(sum[i] (idx x i))"
    assert (
        sexpr(expr("sum<f32>[d, e] cast<f32>(x[d])"))
        == "(sum<f32>[d e] (call cast<f32> (idx x d)))"
    )
    assert sexpr(expr("max(a, b)")) == "(call max a b)"
    assert sexpr(expr("min<T>(a)")) == "(call min<T> a)"
    assert sexpr(expr("sum + 1")) == "(+ sum 1)"
    assert sexpr(expr("sum < f32 > x")) == "(> (< sum f32) x)"
    (stmt,) = body("let sum = sum[i] x[i]")
    assert isinstance(stmt, ast.LetStmt) and sexpr(stmt.pattern) == "sum"
    for word in ("prod", "max", "min", "any", "all"):
        reduction = expr(f"{word}[k] x[k]")
        assert isinstance(reduction, ast.Reduction) and reduction.kind == word
        assert reduction.kind_span.text == word


def test_rule_4_comprehension_or_pattern() -> None:
    comp, let = body("let c[m, n] = a[m, n]\nlet (c, d) = t")
    assert isinstance(comp, ast.ComprehensionStmt) and comp.name.name == "c"
    assert isinstance(let, ast.LetStmt) and isinstance(let.pattern, ast.TuplePattern)


def test_rule_5_and_6_assignment_and_optional_return_value() -> None:
    ret, assign = body("return\nx = 1")
    assert isinstance(ret, ast.ReturnStmt) and ret.value is None and ret.span.text == "return"
    assert isinstance(assign, ast.AssignStmt)
    (ret,) = body("return x == 1")
    assert isinstance(ret, ast.ReturnStmt) and sexpr(ret.value) == "(== x 1)"
    (ret,) = body("return -1")
    assert isinstance(ret, ast.ReturnStmt) and sexpr(ret.value) == "(u- 1)"
    fn = parse_ok("module m\nfn f() { return }").items[0]
    assert isinstance(fn, ast.FnDecl) and isinstance(fn.body.stmts[0], ast.ReturnStmt)


def test_rule_7_match_arms_have_no_separator() -> None:
    value = expr("match x {\n some((a, b)) => a\n none => y\n other => z }")
    assert sexpr(value) == "(match x ((some (ptuple a b)) => a) (none => y) (other => z))"
    assert errors("module m\nfn f() { let y = match x { (a, b) => a\n none => 0 } }") == [
        ("E1101", "(")
    ]


def test_rule_8_if_and_match_are_not_operands() -> None:
    found = diagnostics("module m\nfn f() { let y = x + if c { a } else { b } }")
    assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1101", "if")]
    assert found[0].help and "parentheses" in found[0].help[0]
    assert errors("module m\nfn f() { let y = -match v { none => 1 } }") == [("E1101", "match")]
    assert sexpr(expr("x + (if c { a } else { b })")) == "(+ x (paren (if c a b)))"
    assert (
        sexpr(expr("sum[i] if c { x[i] } else { y[i] }")) == "(sum[i] (if c (idx x i) (idx y i)))"
    )
    assert sexpr(expr("f(if c { a } else { b })")) == "(call f (if c a b))"


def test_rule_9_no_else_if() -> None:
    (found,) = diagnostics("module m\nfn f() { let y = if a { 1 } else if b { 2 } else { 3 } }")
    assert found.code == "E1101" and found.span is not None and found.span.text == "if"
    assert found.message == "expected `{`, found keyword `if`"
    assert found.help and "nest the `if`" in found.help[0]


def test_rule_10_single_prefix_operator() -> None:
    assert errors("module m\nfn f() { let a = --x\n let b = !!c\n let d = -(-x) }") == [
        ("E1101", "-"),
        ("E1101", "!"),
    ]
    assert sexpr(expr("-(-x)")) == "(u- (paren (u- x)))"


def test_rule_11_parenthesis_or_tuple() -> None:
    assert isinstance(expr("(a)"), ast.Paren)
    tuple_expr = expr("(a, b)")
    assert isinstance(tuple_expr, ast.TupleExpr) and not tuple_expr.trailing_comma
    one = expr("(a,)")
    assert isinstance(one, ast.TupleExpr) and one.trailing_comma


def test_rule_12_tensor_types_and_other_types() -> None:
    assert sexpr(type_of("Tensor[B, *S, H / N; T]")) == "Tensor[B *S (/ H N); T]"
    assert sexpr(type_of("Tensor")) == "Tensor"
    assert sexpr(type_of("Tensor[2 * H; f32]?")) == "Tensor[(* 2 H); f32]?"
    assert sexpr(type_of("(f32, Tensor[N; i32])")) == "(ttuple f32 Tensor[N; i32])"
    assert sexpr(type_of("(f32,)")) == "(ttuple f32)"
    assert sexpr(type_of("(f32)")) == "f32"
    assert sexpr(type_of("linear.Linear<H, H>")) == "linear.Linear<H H>"
    assert sexpr(type_of("[Layer<H>; N * 2]")) == "[Layer<H>; (* N 2)]"
    assert sexpr(type_of("Dense<In, Out>?")) == "Dense<In Out>?"


@pytest.mark.parametrize(
    ("source", "shape"),
    [
        ("x[:]", "(idx x _:_)"),
        ("x[1:]", "(idx x 1:_)"),
        ("x[:3]", "(idx x _:3)"),
        ("x[::2]", "(idx x _:_:2)"),
        ("x[1::2]", "(idx x 1:_:2)"),
        ("x[1:5:2]", "(idx x 1:5:2)"),
        ("x[a:b:]", "(idx x a:b:_)"),
        ("x[1::]", "(idx x 1:_:_)"),
        ("x[: :2]", "(idx x _:_:2)"),
        ("x[..., 0::2]", "(idx x ... 0:_:2)"),
        ("x[*s, i]", "(idx x *s i)"),
        ("x[:, D:2 * D]", "(idx x _:_ D:(* 2 D))"),
        ("x[N - 1]", "(idx x (- N 1))"),
    ],
)
def test_rule_13_slices(source: str, shape: str) -> None:
    assert sexpr(expr(source)) == shape


def test_rule_13_slice_fields() -> None:
    index = expr("x[::2, 1:]")
    assert isinstance(index, ast.Index)
    step_slice, open_slice = index.components
    assert isinstance(step_slice, ast.Slice) and step_slice.has_step and step_slice.stop is None
    assert step_slice.span.text == "::2"
    assert isinstance(open_slice, ast.Slice) and not open_slice.has_step
    assert open_slice.span.text == "1:"


def test_rule_14_reduction_extent() -> None:
    assert sexpr(expr("x + sum[i] a[i] * b[i]")) == "(+ x (sum[i] (* (idx a i) (idx b i))))"
    assert sexpr(expr("sum[i] a[i] + 1")) == "(sum[i] (+ (idx a i) 1))"
    assert sexpr(expr("sum[b, n] gap[b, n] / cast<f32>(B * N)")) == (
        "(sum[b n] (/ (idx gap b n) (call cast<f32> (* B N))))"
    )


def test_rule_15_shape_literal_or_array_type() -> None:
    call = expr("f<[B, S], [L<H>; N]>(x)")
    assert isinstance(call, ast.Call) and call.generic_args is not None
    shape, array = call.generic_args
    assert isinstance(shape, ast.ShapeLit) and isinstance(array, ast.ArrayType)


def test_literal_values() -> None:
    literals = [expr(text) for text in ("1_000", "0xff", "0b1010", "9223372036854775808",
                                        "2.5e-3", "1e999", '"a\\n\\u{41}\\"\\\\"')]  # fmt: skip
    values: list[object] = []
    for literal in literals:
        assert isinstance(literal, (ast.IntLit, ast.FloatLit, ast.StringLit))
        values.append(literal.value)
    assert values == [1000, 255, 10, 9223372036854775808, 0.0025, float("inf"), 'a\nA"\\']
    assert [getattr(v, "text", None) for v in literals[:2]] == ["1_000", "0xff"]
    huge = "9" * 5000
    value = expr(huge)
    assert isinstance(value, ast.IntLit) and value.value == int(huge[:4000]) * 10**1000 + int(
        huge[4000:]
    )


def test_spans_of_nodes() -> None:
    text = "module m\nfn f() {\n    let y = cast<f32>(a.b) + x[1:2]\n}\n"
    tree = parse_ok(text)
    fn = tree.items[0]
    assert isinstance(fn, ast.FnDecl)
    assert fn.span.text == text[9:-1] and fn.body.span.text.startswith("{")
    (stmt,) = fn.body.stmts
    assert isinstance(stmt, ast.LetStmt) and stmt.span.text == "let y = cast<f32>(a.b) + x[1:2]"
    value = stmt.value
    assert isinstance(value, ast.Binary) and value.op_span.text == "+"
    assert value.left.span.text == "cast<f32>(a.b)" and value.right.span.text == "x[1:2]"
    assert_spans_exact(tree)


# ---------------------------------------------------------------- section 3.4 errors


def test_missing_module_is_e1102() -> None:
    for text in ("", "// nothing\n", "fn f() {}", "use a.b\n"):
        found = diagnostics(text)
        assert [d.code for d in found] == ["E1102"], text
        assert found[0].help == ("every file starts with a declaration such as `module my.module`",)
    tree, _ = parse_text("fn f() {}\nconst A = 1")
    assert tree is not None and len(tree.items) == 2  # items still parse


def test_unexpected_token_says_expected_and_found() -> None:
    (found,) = diagnostics("module m\nfn f(x i32) {}")
    assert found.code == "E1101" and found.message == "expected `:`, found identifier `i32`"
    (found,) = diagnostics("module m\nconst = 1")
    assert found.message == "expected a constant name, found `=`"


def test_expression_statement() -> None:
    (found,) = diagnostics("module m\nfn f() {\n    foo(x)\n}")
    assert found.code == "E1101" and found.span is not None and found.span.text == "foo"
    assert found.notes == ("there are no expression statements",)
    assert found.help == ("bind it with `let` or `return` it",)


def test_keywords_and_reserved_words_as_names() -> None:
    assert errors("module m\nfn f() { let fn = 1\n let in = 2 }") == [
        ("E1101", "fn"),
        ("E1101", "in"),
    ]
    for word in ("rng",):
        found = diagnostics(f"module m\nfn f({word}: i32) {{ let {word} = 1 }}")
        assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1004", word)] * 2
        assert found[0].notes == ("this word is reserved for future features",)
    # language-extensions 0.1: `kernel` is a keyword now, E1101 as a name.
    found = diagnostics("module m\nfn f(kernel: i32) { let kernel = 1 }")
    assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1101", "kernel")] * 2
    assert [c for c, _ in errors("module m\nconst async = 1\nstruct impl {}\nuse a::{b as mut}")] == [
        "E1004", "E1004", "E1101", "E1004",
    ]  # fmt: skip


def test_use_after_items_and_members_outside_blocks() -> None:
    assert errors("module m\nconst A = 1\nuse a.b") == [("E1101", "use")]
    assert errors("module m\nparam w: Tensor[N; f32]") == [("E1101", "param")]
    assert errors("module m\nblock B {\n    pub param w: Tensor[N; f32]\n}") == [("E1101", "pub")]


def test_member_defaults_and_op_result() -> None:
    assert errors(
        "module m\nblock B {\n buffer a: Tensor[N; f32] = none\n state s: Tensor[N; f32] = x\n"
        " param p: Tensor[N; f32]? = none\n}"
    ) == [("E1101", "="), ("E1101", "=")]
    found = diagnostics("module m\nop f(x: f32) { return x }")
    assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1101", "{")]
    assert found[0].notes == ("an `op` must declare its result type",)


def test_where_entries_and_generic_kinds() -> None:
    assert errors("module m\nfn f<N: Dim>() where N + 1, N > 0, (N < 2) {}") == [
        ("E1101", "N + 1"),
        ("E1101", "(N < 2)"),
    ]
    (found,) = diagnostics("module m\nfn f<T: Floating>() {}")
    assert found.code == "E1101" and found.span is not None and found.span.text == "Floating"
    assert found.help == ("valid kinds are `Dim`, `Shape`, `DType`, `Numeric`, `Integer`, `Float`",)


def test_tuple_arm_else_if_and_struct_commas() -> None:
    text = (
        "module m\nstruct S { a: i32, b: i32 }\n"
        "fn f() -> i32 {\n return if a { match v { (x, y) => x } } else if b { 1 } else { 2 }\n}"
    )
    assert errors(text) == [("E1101", ","), ("E1101", "("), ("E1101", "if")]


def test_unsupported_syntax_is_e1103() -> None:
    text = (
        "module m\nuse self.a\nuse super::x\nextern op f(x: f32) -> f32\n"
        "enum E { A(i32), B }\nfn g(x: Tensor[; f32]) {}\n"
    )
    assert errors(text) == [
        ("E1103", "self"),
        ("E1103", "super"),
        ("E1103", "extern"),
        ("E1103", "(i32)"),
        ("E1103", "Tensor[; f32]"),
    ]
    tree, found = parse_text(text)
    assert tree is not None and tree.uses == ()  # rejected imports are not kept
    rank_zero = found[-1]
    assert rank_zero.help == ("use the scalar type `f32` instead of a rank-0 tensor",)


def test_trailing_comma_before_semicolon_in_tensor_type() -> None:
    assert errors("module m\nfn f(x: Tensor[N,; f32]) {}") == [("E1101", ";")]


def test_runtime_for_parses_and_use_as_needs_braces() -> None:
    assert errors("module m\nfn f() { for i in 0..3 {} }") == []  # language-extensions 1
    assert errors("module m\nuse a.b::c as d") == [("E1101", "as")]


# ---------------------------------------------------------------- recovery


def test_recovery_reports_every_error_of_a_file() -> None:
    text = """module m

fn f() {
    let a = 1 +
    let b = (2
    foo(b)
    let c = 3
    c = c * * 2
}

const = 4

fn g(x: ) -> f32 {
    return x
}

block B {
    param w: Tensor[N; f32] = none
    state s: Tensor[N; f32] = w
    junk here
    pub fn ok() {}
}

fn h() { let z = ] }
"""
    tree, found = parse_text(text)
    lines = [(d.code, d.span.file.line_col(d.span.start)[0]) for d in found if d.span]
    # `foo(b)` is skipped with the unclosed `(` of line 5; `g` with its broken signature.
    assert lines == [
        ("E1101", 5), ("E1101", 6), ("E1101", 8), ("E1101", 11), ("E1101", 13),
        ("E1101", 19), ("E1101", 20), ("E1101", 24),
    ]  # fmt: skip
    assert tree is not None
    names = [item.name.name for item in tree.items]
    assert names == ["f", "B", "h"]
    f = tree.items[0]
    assert isinstance(f, ast.FnDecl)
    assert [type(s).__name__ for s in f.body.stmts] == ["LetStmt"]  # `let c = 3`
    block = tree.items[1]
    assert isinstance(block, ast.BlockDecl)
    assert [p.name.name for p in block.parts] == ["w", "s", "ok"]


def test_at_most_one_error_per_token_position() -> None:
    found = diagnostics("module m\nfn f() { let x = (\n}")
    assert len({d.span.start for d in found if d.span}) == len(found)


def test_missing_closing_brace_lets_the_next_item_parse() -> None:
    tree, found = parse_text("module m\nfn f() {\n    let x = 1\nfn g() {}\n")
    assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1101", "fn")]
    assert tree is not None and [i.name.name for i in tree.items] == ["f", "g"]


def test_stray_closing_brace_at_top_level() -> None:
    tree, found = parse_text("module m\nfn f() {}\n}\nfn g() {}\n")
    assert [(d.code, d.span.text if d.span else "") for d in found] == [("E1101", "}")]
    assert tree is not None and [i.name.name for i in tree.items] == ["f", "g"]


def test_lexical_and_syntax_errors_come_together_in_order() -> None:
    found = diagnostics('module m\nfn f() { let a = 1 $ 2\n let b = 007 }\nconst C = "\\q"\n')
    assert [d.code for d in found] == ["E1001", "E1101", "E1005", "E1003"]


def test_matmul_operator_is_one_error_with_the_fix() -> None:
    """`a @ b` is one E1001 whose help names `std.linalg::matmul` and index notation."""
    found = diagnostics("module m\nfn f() { let a = x @ w\n let b = 1 }\n")
    assert [d.code for d in found] == ["E1001"]
    assert "matmul" in found[0].help[0] and "std.linalg" in found[0].help[0]
    assert "sum[k]" in found[0].help[1]


# ---------------------------------------------------------------- nesting limits


@pytest.mark.parametrize("depth", [300, 20_000])
def test_deep_brackets_are_e1101_not_recursion_error(depth: int) -> None:
    for opener, closer in (("(", ")"), ("[", "]"), ("f(", ")")):
        text = f"module m\nconst A = {opener * depth}1{closer * depth}\nconst B = 2\n"
        tree, found = parse_text(text)
        assert [d.code for d in found] == ["E1101"] and "nest" in found[0].message
        assert tree is not None and tree.items[-1].name.name == "B"


def test_deep_types_patterns_and_statements() -> None:
    cases = [
        "module m\nconst A: " + "(" * 300 + "T" + ")" * 300 + " = 1\n",
        "module m\nconst A: " + "F<" * 300 + "T" + ">" * 300 + " = 1\n",
        "module m\nfn f() { let " + "(" * 300 + "a" + ",)" * 300 + " = t }\n",
        "module m\nfn f() {" + " while c {" * 300 + "}" * 300 + "}\n",
        "module m\nconst A = " + "-" * 300 + "1\n",
        "module m\nconst A = a" + ".b" * 300 + "\n",
        "module m\n" + "block B {" * 300 + "}" * 300 + "\n",
    ]
    for text in cases:
        _, found = parse_text(text)
        assert "E1101" in [d.code for d in found], text[:40]


def test_long_operator_chains() -> None:
    ok = "module m\nconst A = " + " + ".join(["a"] * 200) + "\n"
    parse_ok(ok)
    long_chain = "module m\nconst A = " + " + ".join(["a"] * 1000) + "\n"
    assert [d.code for d in diagnostics(long_chain)] == ["E1101"]
    # Short chains, each around the previous one, add up to a tall (left-deep) tree
    # although no single chain or bracket nesting exceeds the limit.
    nested = "module m\nconst A = " + "(" * 100 + "a" + " + a + a + a)" * 100 + "\n"
    assert [d.code for d in diagnostics(nested)] == ["E1101"]
    right_nested = "module m\nconst A = " + "(a + a + a + " * 100 + "a" + ")" * 100 + "\n"
    parse_ok(right_nested)  # 2 levels per parenthesis: within the limit


def test_speculation_stays_linear() -> None:
    # Each `<` after a name is tried as generic arguments once (3.3 rule 1 memo).
    cases = [
        "module m\nconst A = " + "a < " * 2000 + "b\n",
        "module m\nconst A = " + "f<" * 200 + "T" + ">" * 200 + "\n",
        "module m\nconst A = f<" + "T<" * 100 + "A" + ">+1" * 100 + ">(x)\n",
        "module m\nconst A = " + "f<[" * 120 + "a, b" + "]>(x)" * 120 + "\n",
    ]
    for text in cases:
        start = time.perf_counter()
        parse_text(text)
        assert time.perf_counter() - start < 5.0, text[:40]


# ---------------------------------------------------------------- dump and robustness


def test_dump_ast_is_readable() -> None:
    tree = parse_ok("module m\n// note\nfn f(x: f32) -> f32 {\n    return -x\n}\n")
    dump = dump_ast(tree)
    assert dump.splitlines() == [
        "File module=m @1:1-6:1",
        "  items[0]: FnDecl pub=False kind='fn' name=f @3:1-5:2",
        "    params: Params trailing_comma=False @3:5-3:13",
        "      params[0]: Param name=x @3:6-3:12",
        "        type: NamedType path=f32 @3:9-3:12",
        "    result: NamedType path=f32 @3:17-3:20",
        "    body: Body @3:21-5:2",
        "      stmts[0]: ReturnStmt @4:5-4:14",
        "        value: Unary op='-' @4:12-4:14",
        "          operand: Name ident=x @4:13-4:14",
        "comment @2:1-2:8 own_line=True '// note'",
    ]


def test_comments_are_attached_to_the_file() -> None:
    tree = parse_ok("module m // a\n/* b */\nconst A = 1\n")
    assert [(c.text, c.own_line) for c in tree.comments] == [("// a", False), ("/* b */", True)]


FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SOUP = sorted(KEYWORDS) + list(PUNCTUATION) + [
    "x", "T", "N", "f32", "Tensor", "Dim", "Shape", "sum", "max", "yield", "0", "1.5", "0xZ",
    '"s"', '"\\q', "//c\n", "/*", "*/", "\n", "@", "\x00", "é",
]  # fmt: skip


def check_never_raises(source: SourceFile) -> None:
    tree, found = parse(source)
    assert tree is not None
    for diagnostic in found:
        assert diagnostic.code in CODES and diagnostic.code.startswith("E1")
        assert diagnostic.span is not None
        assert 0 <= diagnostic.span.start <= diagnostic.span.end <= len(source.text)
    assert found == sorted(found, key=lambda d: (d.span.start, d.span.end) if d.span else (-1, 0))


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    check_never_raises(SourceFile.from_bytes("fuzz.linnet", data))


@FUZZ
@given(st.lists(st.sampled_from(SOUP), max_size=120))
def test_random_token_soup_never_raises(words: list[str]) -> None:
    check_never_raises(SourceFile("soup.linnet", "module m\n" + " ".join(words)))


@FUZZ
@given(st.data())
def test_mutated_valid_programs_never_raise(data: st.DataObject) -> None:
    blocks = doc_blocks()
    text = blocks[data.draw(st.integers(0, len(blocks) - 1))]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 12)))
    insert = data.draw(st.sampled_from(SOUP))
    check_never_raises(SourceFile("mutant.linnet", text[:start] + insert + text[end:]))


WRAPPERS = [
    "({})", "[{}]", "f({})", "f<{}>(y)", "g<[{}]>(y)", "sum[i] {}", "if c {{ {} }} else {{ y }}",
    "match v {{ a => {} }}", "x[{}]", "x[{}:]", "some({})", "({},)", "a + ({})", "-({})",
    "f(k = {})", "(a, {})", "cast<T>({}).m",
]  # fmt: skip


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(WRAPPERS), min_size=200, max_size=400))
def test_mixed_deep_nesting_never_overflows(wrappers: list[str]) -> None:
    value = "z"
    for wrapper in wrappers:
        value = wrapper.format(value)
    _, found = parse_text(f"module m\nfn f() {{\n    let r = {value}\n    let ok = 1\n}}\n")
    assert {d.code for d in found} <= {"E1101"}


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("module m\nfn f() -> f32 {\n    retrun 1.0\n}\n", "return"),
        ("module m\nfn f() -> f32 {\n    lte x = 1.0\n    return x\n}\n", "let"),
        ("module m\npub blok B {\n}\n", "block"),
        ("module m\nblock B {\n    parma w: Tensor[2; f32]\n}\n", "param"),
        ("module m\nsue std.nn.linear::{linear}\n", "use"),
        ("module m\npbu fn f() {}\n", "pub"),
        ("module m\nfn f<N: Dm>() {}\n", "Dim"),
    ],
)
def test_a_misspelt_keyword_or_kind_is_suggested(text: str, meant: str) -> None:
    found = diagnostics(text)
    assert [d.code for d in found] == ["E1101"]
    assert found[0].help[0] == f"did you mean `{meant}`?"


def test_a_call_is_not_taken_for_a_misspelt_keyword() -> None:
    """`ret(x)` is an expression statement, not a typo of `return` (no name follows)."""
    found = diagnostics("module m\nfn f(x: f32) {\n    ret(x)\n}\n")
    assert [d.code for d in found] == ["E1101"]
    assert found[0].help == ("bind it with `let` or `return` it",)
