"""One error per mistake, with the fix (issue 11): cascades silenced, did-you-mean, hints.

Each case is a small program with one mistake; it must give exactly one
diagnostic, at the mistake, whose help names the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checker_support import STDLIB, check, only, position

from linnet.check.checker import check_graph
from linnet.check.modules import load_source
from linnet.diagnostics import Diagnostic
from linnet.pipeline import check_source

MLP = """\
module mlp

use std.nn.linear::{Linear}
use std.nn.activations::{relu}
use std.nn.softmax::{softmax}

pub block Mlp<In: Dim, Hidden: Dim, Out: Dim, T: Float = f32> {
    sub fc1: Linear<In, Hidden, T>
    sub fc2: Linear<Hidden, Out, T>

    pub entry forward<B: Dim>(x: Tensor[B, In; T]) -> Tensor[B, Out; T] {
        let h = relu(fc1.forward(x))
        let y = fc2.forward(h)
        return softmax(y)
    }
}
"""


def one(text: str) -> Diagnostic:
    """The one diagnostic of a program (loading errors included)."""
    graph = load_source(text, "t.linnet", STDLIB)
    found = graph.diagnostics if graph.has_errors else check_graph(graph).diagnostics
    assert len(found) == 1, [(d.code, position(d), d.message) for d in found]
    return found[0]


def line_of(d: Diagnostic) -> int:
    return position(d)[0]


def test_the_valid_mlp_is_clean() -> None:
    assert not check(MLP).diagnostics


def test_a_misspelt_method_is_one_error_with_the_method() -> None:
    """Issue 11: `fc1.foward` gave 8 errors, the real one 4th, seven E2110 cascades."""
    d = one(MLP.replace("fc1.forward", "fc1.foward"))
    assert (d.code, line_of(d)) == ("E2107", 12)
    assert d.help == ("did you mean `forward`?",)


def test_a_misspelt_type_is_one_error_marked_on_the_name() -> None:
    d = one(MLP.replace("sub fc1: Linear", "sub fc1: Lniear"))
    assert (d.code, line_of(d)) == ("E1201", 8)
    assert d.span is not None and d.span.text == "Lniear"
    assert d.help == ("did you mean `Linear`?",)


def test_a_misspelt_import_is_reported_at_the_import_only() -> None:
    d = one(MLP.replace("activations::{relu}", "activations::{rleu}"))
    assert (d.code, line_of(d)) == ("E1201", 4)
    assert d.help == ("did you mean `relu`?",)


def test_a_missing_import_is_one_error_noting_every_use() -> None:
    text = MLP.replace("use std.nn.activations::{relu}\n", "\n").replace(
        "let y = fc2.forward(h)", "let y = fc2.forward(relu(h))"
    )
    d = one(text)
    assert (d.code, line_of(d)) == ("E1201", 12)
    assert d.notes == ("`relu` is also used on line 13",)
    assert d.help == (
        "`relu` is declared in `std.nn.activations`: add `use std.nn.activations::{relu}`",
    )


@pytest.mark.parametrize("typo", ["sofmax", "sotfmax", "Softmax"])
def test_misspelt_functions_suggest_the_imported_one(typo: str) -> None:
    d = one(MLP.replace("return softmax(y)", f"return {typo}(y)"))
    assert (d.code, line_of(d), d.help) == ("E1201", 14, ("did you mean `softmax`?",))


def test_a_misspelt_module_suggests_the_module() -> None:
    d = one(MLP.replace("std.nn.softmax", "std.nn.softmaxx"))
    assert d.code == "E1202" and d.help == ("did you mean `std.nn.softmax`?",)
    d = one("module t\n\nuse std.nn.norms::{layer_norm}\n")
    assert d.code == "E1202" and d.help == ("did you mean `std.nn.norm`?",)
    d = one("module t\n\nuse std.norm::{layer_norm}\n")
    assert d.help == ("did you mean `std.nn.norm`?",)


@pytest.mark.parametrize(
    ("call", "hint"),
    [
        ("LayerNorm(x, g, b, 0.00001)", "did you mean `layer_norm` of `std.nn.norm`?"),
        ("Linear(x, w)", "did you mean `linear` of `std.nn.linear`?"),
        ("GELU(x)", "did you mean `gelu` of `std.nn.activations`?"),
        ("matmul(x, w)", "`matmul` is declared in `std.linalg`: add `use std.linalg::{matmul}`"),
        ("bmm(x, w)", "PyTorch's `bmm` is `batched_matmul` in Linnet"),
        ("cat(x, w)", "PyTorch's `cat` is the prelude function `concat` in Linnet"),
    ],
)
def test_pytorch_names_point_at_the_std_function(call: str, hint: str) -> None:
    text = (
        "module t\n\npub fn f(x: Tensor[2, 4; f32], w: Tensor[4, 4; f32], g: Tensor[4; f32],"
        f" b: Tensor[4; f32]) -> Tensor[2, 4; f32] {{\n    return {call}\n}}\n"
    )
    d = one(text)
    assert (d.code, line_of(d)) == ("E1201", 4)
    assert d.help[0].startswith(hint)
    if call.startswith("cat("):  # also a typo of the prelude's `cast`
        assert d.help[1] == "or did you mean `cast`?"


def test_matmul_operator_is_one_error() -> None:
    text = "module t\n\npub fn f(x: Tensor[2, 4; f32], w: Tensor[4, 3; f32]) -> Tensor[2, 3; f32] {\n    return x @ w\n}\n"
    found = check_source(text, "t.linnet", STDLIB).diagnostics
    assert [(d.code, line_of(d)) for d in found] == [("E1001", 4)]
    assert "std.linalg" in found[0].help[0]


KINDS = """\
module kinds

use std.nn.linear::{Linear}
use std.nn.linear

const SCALE: f32 = 2.0

pub struct Pair<N: Dim> {
    left: Tensor[N; f32]
}

fn double<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return x * SCALE
}

pub block Model<Hidden: Dim> {
    param gain: Tensor[Hidden; f32]
    sub proj: Linear<Hidden, Hidden, f32>

    pub entry forward<Batch: Dim>(input: Tensor[Batch, Hidden; f32]) -> Tensor[Batch, Hidden; f32] {
        let scaled = input * gain
        let mixed = proj.forward(scaled)
        let y = linear.linear(mixed, proj.weight)
        return y
    }
}
"""


@pytest.mark.parametrize(
    ("old", "new", "code", "meant"),
    [
        ("input * gain", "inptu * gain", "E1201", "input"),  # parameter
        ("proj.forward(scaled)", "proj.forward(scaeld)", "E1201", "scaled"),  # local
        ("x * SCALE", "x * SCAEL", "E1201", "SCALE"),  # constant
        ("input * gain", "input * gian", "E1201", "gain"),  # member
        ("proj.forward(", "proj.froward(", "E2107", "forward"),  # method
        ("proj.forward(", "porj.forward(", "E1201", "proj"),  # sub member
        ("sub proj: Linear", "sub proj: Linaer", "E1201", "Linear"),  # block type
        ("Tensor[Hidden; f32]\n    sub", "Tensor[Hiden; f32]\n    sub", "E1201", "Hidden"),
        ("Tensor[N; f32]\n}", "Tensor[N; f23]\n}", "E1201", "f32"),  # dtype
        (
            "    return x * SCALE",
            "    let p: Pari<N>? = none\n    return x * SCALE",
            "E1201",
            "Pair",
        ),
        ("linear.linear(", "linear.lienar(", "E1201", "linear"),  # module item
    ],
)
def test_every_kind_of_name_gets_a_suggestion(old: str, new: str, code: str, meant: str) -> None:
    assert old in KINDS
    found = [d for d in check(KINDS.replace(old, new, 1)).diagnostics if d.is_error]
    assert len(found) == 1, [(d.code, position(d), d.message) for d in found]
    assert found[0].code == code
    assert f"`{meant}`" in " ".join(found[0].help), found[0].help


def test_kinds_program_is_valid() -> None:
    assert not [d for d in check(KINDS).diagnostics if d.is_error]


def test_a_misspelt_generic_in_a_where_clause_silences_the_proofs_it_would_give() -> None:
    text = """\
    module t

    use std.nn.rope::{rope}

    pub fn f<B: Dim, Heads: Dim, S: Dim, H: Dim>(
        x: Tensor[B, Heads, S, H; f32],
        cos_t: Tensor[S, H; f32],
        sin_t: Tensor[S, H; f32],
    ) -> Tensor[B, Heads, S, H; f32]
    where
        H % 2 == 0
    {
        return rope(x, cos_t, sin_t)
    }
    """
    assert not check(text).diagnostics
    d = only(text.replace("H % 2 == 0", "Hh % 2 == 0"))
    assert (d.code, d.help) == ("E1201", ("did you mean `H`?",))


def test_a_callee_with_a_broken_signature_reports_nothing_at_its_calls() -> None:
    text = """\
    module t

    fn g<N: Dim>(x: Tensor[Nn; f32]) -> Tensor[N; f32] {
        return x
    }

    pub fn f(x: Tensor[3; f32]) -> Tensor[3; f32] {
        return g(x)
    }
    """
    d = only(text)
    assert (d.code, line_of(d)) == ("E1201", 3)


def test_swapped_arguments_are_one_error_that_says_so() -> None:
    text = """\
    module t

    use std.nn.linear::{linear}

    pub fn f<B: Dim, S: Dim>(x: Tensor[B, S, 4; f32], w: Tensor[8, 4; f32]) -> Tensor[B, S, 8; f32] {
        return linear(w, x)
    }
    """
    d = only(text)
    assert d.code == "E2202"
    assert d.help[0] == "the arguments for `weight` and `x` look swapped"


def test_a_mismatch_note_shows_the_bound_generics() -> None:
    text = """\
    module t

    use std.nn.linear::{Linear}

    pub block M {
        sub fc: Linear<4, 8, f32>

        pub entry forward<B: Dim>(x: Tensor[B, 8; f32]) -> Tensor[B, 8; f32] {
            return fc.forward(x)
        }
    }
    """
    d = only(text)
    assert d.code == "E2202"
    assert d.notes[0] == "parameter `x` has type `Tensor[B, 4; f32]`"
    assert d.help == (
        "pass a tensor of shape `[B, 4]`, or state the missing equality in a `where` clause",
    )


def test_the_std_index_follows_the_files(tmp_path: Path) -> None:
    """A name added to a std module is found by the next lookup (no stale cache)."""
    std = tmp_path / "std"
    std.mkdir()
    (std / "extra.linnet").write_text(
        "module std.extra\n\npub fn first() -> f32 {\n    return 1.0\n}\n"
    )
    text = "module t\n\npub fn f() -> f32 {\n    return second()\n}\n"
    d = one_with_std(text, std)
    assert d.help == ("import it with `use`, or declare it",)
    (std / "extra.linnet").write_text(
        "module std.extra\n\npub fn second() -> f32 {\n    return 2.0\n}\n"
    )
    d = one_with_std(text, std)
    assert d.help == ("`second` is declared in `std.extra`: add `use std.extra::{second}`",)


def one_with_std(text: str, std: Path) -> Diagnostic:
    found = check_graph(load_source(text, "t.linnet", std)).diagnostics
    assert len(found) == 1
    return found[0]


def test_a_misspelt_index_variable_suggests_the_bound_one() -> None:
    text = """\
    module t

    pub fn f<M: Dim, K: Dim>(a: Tensor[M, K; f32]) -> Tensor[M; f32] {
        let y[row] = sum[col] a[rwo, col]
        return y
    }
    """
    d = only(text)
    assert (d.code, d.help) == ("E3101", ("did you mean `row`?",))


@pytest.mark.parametrize(
    ("old", "new", "code", "hint"),
    [
        (
            "fc1.forward(x)",
            "Linear(x)",
            "E2106",
            "a block is not called: declare a child `sub linear: Linear<...>` and call "
            "`linear.forward(...)`; or call the function `linear` of `std.nn.linear`",
        ),
        ("fc2.forward(h)", "fc2(h)", "E2106", "call one of its methods: `fc2.forward(...)`"),
        (
            "fc2.forward(h)",
            "fc2.forward(h.T)",
            "E2107",
            "values have no members: transpose with `permute(x, [1, 0])` "
            "(or `std.linalg::transpose`)",
        ),
        (
            "fc1.forward(x)",
            "fc1.forward(x.reshape([B, In]))",
            "E2107",
            "values have no methods: call the prelude function `reshape(x, ...)`",
        ),
        (
            "fc1.forward(x)",
            "self.fc1.forward(x)",
            "E1101",
            "there is no `self`: inside a block its members are bare names (`fc1`)",
        ),
        (
            "-> Tensor[B, Out; T] {",
            "-> Tensor[B, Out] {",
            "E1101",
            "a tensor type ends with its dtype: `Tensor[N, M; f32]`",
        ),
    ],
)
def test_pytorch_habits_get_the_linnet_spelling(old: str, new: str, code: str, hint: str) -> None:
    assert old in MLP
    d = one(MLP.replace(old, new, 1))
    assert (d.code, d.help) == (code, (hint,))


def test_a_wrong_annotation_is_one_error() -> None:
    """The local takes the error type: its later uses do not repeat the mistake."""
    text = MLP.replace("let h = relu(", "let h: Tensor[B, In; T] = relu(")
    d = one(text)
    assert (d.code, line_of(d)) == ("E2202", 12)


def test_a_signature_note_shows_the_childs_generics() -> None:
    d = one(MLP.replace("fc2.forward(h)", "fc2.forward(h, h)"))
    assert d.code == "E2102"
    assert d.notes == (
        "the signature is `fn forward(x: Tensor[*S, Hidden; T]) -> Tensor[*S, Out; T]`",
    )


def test_a_missing_import_of_the_packages_own_module_names_it(tmp_path: Path) -> None:
    from linnet.commands.init import init_package
    from linnet.pipeline import check_paths

    init_package(tmp_path / "pkg")
    src = tmp_path / "pkg" / "src"
    (src / "layers.linnet").write_text(
        "module pkg.layers\n\npub fn double(x: f32) -> f32 {\n    return x * 2.0\n}\n"
    )
    (src / "lib.linnet").write_text(
        "module pkg\n\npub fn f(x: f32) -> f32 {\n    return double(x)\n}\n"
    )
    found = check_paths([src / "lib.linnet"], STDLIB).diagnostics
    assert [(d.code, d.help) for d in found] == [
        ("E1201", ("`double` is declared in `crate.layers`: add `use crate.layers::{double}`",))
    ]
