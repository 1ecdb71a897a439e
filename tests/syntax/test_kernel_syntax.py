"""Kernel syntax (language-extensions 0.1, 0.2 rules 20-22, 4.1): parse, errors, recovery."""

from __future__ import annotations

from linnet.syntax import ast
from linnet.syntax.parser import parse_text


def parse_ok(text: str) -> ast.File:
    tree, diagnostics = parse_text(text)
    assert diagnostics == [], [(d.code, d.message) for d in diagnostics]
    assert tree is not None
    return tree


def errors(text: str) -> list[tuple[str, str]]:
    _, diagnostics = parse_text(text)
    return [(d.code, d.span.text if d.span else "") for d in diagnostics]


KERNEL = """module m
pub kernel k<N: Dim, B: Dim>(s: f32, x: Tensor[N; f32]) -> (y: Tensor[N; f32], z: Tensor[N; i32])
    grid((N + B - 1) / B, 1) stages(2) warps(4)
where B > 0 {
    let i = program_id(0) * B + iota<i32>(B)
    store(y[i], load(x[i], i < N) * s, i < N)
    atomic_add(z[i], 1)
}
op f<N: Dim>(s: f32, x: Tensor[N; f32]) -> (Tensor[N; f32], Tensor[N; i32]) kernel k<N, 64> {
    return (x * s, cast<i32>(x))
}
"""


def test_kernel_header_parts() -> None:
    tree = parse_ok(KERNEL)
    k, op = tree.items
    assert isinstance(k, ast.KernelDecl) and k.pub and k.name.name == "k"
    assert [r.name.name for r in k.results] == ["y", "z"] and k.results_paren
    assert [g.span.text for g in k.grid] == ["(N + B - 1) / B", "1"]
    assert [(h.word, h.value.span.text) for h in k.hints] == [("warps", "4"), ("stages", "2")]
    assert k.where is not None and len(k.body.stmts) == 3
    writes = [s for s in k.body.stmts if isinstance(s, ast.WriteStmt)]
    assert [(w.word, w.mask is not None) for w in writes] == [
        ("store", True),
        ("atomic_add", False),
    ]
    assert isinstance(op, ast.FnDecl) and op.kernel is not None
    assert op.kernel.name.name == "k" and op.kernel.span.text == "kernel k<N, 64>"


def test_single_result_without_parentheses() -> None:
    tree = parse_ok("module m\nkernel k(x: Tensor[4; f32]) -> y: Tensor[4; f32] grid(1) {}\n")
    (k,) = tree.items
    assert isinstance(k, ast.KernelDecl) and not k.results_paren and k.hints == ()


def test_write_words_stay_names_elsewhere() -> None:
    # 0.2 rule 20: followed by `=` the word is an assignment target; in expressions a name
    tree = parse_ok(
        "module m\nfn f() -> i32 {\n    var store = 1\n    store = store + 1\n    return store\n}\n"
    )
    (fn,) = tree.items
    assert isinstance(fn, ast.FnDecl)
    assert [type(s).__name__ for s in fn.body.stmts] == ["VarStmt", "AssignStmt", "ReturnStmt"]


def test_header_errors() -> None:
    missing_grid = "module m\nkernel k(x: Tensor[4; f32]) -> y: Tensor[4; f32] {}\n"
    assert errors(missing_grid) == [("E1101", "{")]
    unnamed = "module m\nkernel k(x: Tensor[4; f32]) -> Tensor[4; f32] grid(1) {}\n"
    assert [code for code, _ in errors(unnamed)] == ["E1101"]
    on_fn = "module m\nfn f(x: f32) -> f32 kernel k { return x }\n"
    assert errors(on_fn) == [("E1101", "kernel")]
    wrong_arity = (
        "module m\nkernel k(x: Tensor[4; f32]) -> y: Tensor[4; f32] grid(1) {\n    store(y[0])\n}\n"
    )
    assert [code for code, _ in errors(wrong_arity)] == ["E1101"]


def test_kernel_is_a_keyword() -> None:
    assert errors("module m\nfn kernel() -> f32 { return 1.0 }\n")[0] == ("E1101", "kernel")


def test_recovery_after_a_broken_write() -> None:
    # a broken write is one error; the next write and the next item still parse (rule 22)
    text = (
        "module m\nkernel k(x: Tensor[4; f32]) -> y: Tensor[4; f32] grid(1) {\n"
        "    let i = iota<i32>(4)\n    store(y[i], , )\n    store(y[i], load(x[i]))\n}\n"
        "fn g() -> f32 { return 1.0 }\n"
    )
    tree, diagnostics = parse_text(text)
    assert [d.code for d in diagnostics] == ["E1101"]
    assert tree is not None
    k, g = tree.items
    assert isinstance(k, ast.KernelDecl) and isinstance(g, ast.FnDecl)
    assert [type(s).__name__ for s in k.body.stmts] == ["LetStmt", "WriteStmt"]
