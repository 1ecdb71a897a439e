"""Names, imports, visibility, duplicates and lints (language.md 4.2-4.4, 10.1, 16.2 E12xx, W1xxx).

Each case is a whole module and the exact list of findings it must produce,
as (code, line, column) of the primary span in the sorted order of 16.5: no
finding may be missing, and no follow-up error may appear.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checker_support import Finding, check, clean, findings, position

NAME_CASES: dict[str, tuple[str, list[Finding]]] = {
    "e1201_unknown_name": (
        """\
module t.a
pub fn f(x: f32) -> f32 {
    return y + x
}
""",
        [("E1201", 3, 12)],
    ),
    "e1201_unknown_function_and_type": (
        """\
module t.a
pub fn f(x: Widget) -> f32 {
    return g(1.0)
}
""",
        [("E1201", 2, 13), ("E1201", 3, 12)],
    ),
    "e1201_assign_unknown": (
        """\
module t.a
pub fn f(x: f32) -> f32 {
    z = x
    return x
}
""",
        [("E1201", 3, 5)],
    ),
    "e1201_prelude_as_value": (
        """\
module t.a
pub fn f(x: f32) -> f32 {
    let e = exp
    return x
}
""",
        [("E1201", 3, 13)],
    ),
    "e1204_two_functions": (
        """\
module t.a
fn f(x: f32) -> f32 {
    return x
}
fn f(x: f32) -> f32 {
    return x
}
""",
        [("E1204", 5, 4)],
    ),
    "e1205_params_generics_members_fields_variants": (
        """\
module t.a
fn f<N: Dim, N: Dim>(x: Tensor[N; f32], x: f32) -> f32 {
    return 0.0
}
struct S {
    a: f32
    a: f32
}
enum E { A, B, A }
block B<H: Dim> {
    param H: Tensor[2; f32]
    param w: Tensor[2; f32]
    buffer w: Tensor[2; f32]
}
""",
        [
            ("E1205", 2, 14),
            ("E1205", 2, 41),
            ("E1205", 7, 5),
            ("E1205", 9, 16),
            ("E1205", 11, 11),
            ("E1205", 13, 12),
        ],
    ),
    "e1207_prelude_names": (
        """\
module t.a
fn max(x: f32) -> f32 {
    return x
}
fn g<exp: Dim>(cast: f32) -> f32 {
    let sqrt = cast
    return sqrt
}
""",
        [("E1207", 2, 4), ("E1207", 5, 6), ("E1207", 5, 16), ("E1207", 6, 9)],
    ),
    "e1208_kinds": (
        """\
module t.a
const C = 3
fn helper(x: f32) -> f32 {
    return x
}
fn f<S: Dim, *P: Shape, T: Float>(x: C, y: Tensor[2; helper]) -> f32 {
    let a = helper
    let b = T
    let c = P
    let d = f32
    return 0.0
}
""",
        [
            ("E1208", 6, 38),
            ("E1208", 6, 54),
            ("E1208", 7, 13),
            ("E1208", 8, 13),
            ("E1208", 9, 13),
            ("E1208", 10, 13),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(NAME_CASES))
def test_findings(name: str) -> None:
    source, expected = NAME_CASES[name]
    assert findings(source) == expected


HELPERS = """\
module std.helpers

pub fn open_fn(x: f32) -> f32 {
    return x
}

fn hidden(x: f32) -> f32 {
    return x
}

pub block Box<H: Dim> {
    param w: Tensor[H; f32]

    pub fn forward(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return x * w
    }

    fn secret(x: Tensor[H; f32]) -> Tensor[H; f32] {
        return x
    }
}
"""


@pytest.fixture
def std_root(tmp_path: Path) -> Path:
    (tmp_path / "helpers.linnet").write_text(HELPERS)
    return tmp_path


def test_imports_and_visibility_across_modules(std_root: Path) -> None:
    program = check(
        """
        module t.a
        use std.helpers::{open_fn, hidden, missing, Box}
        use std.helpers

        fn open_fn(x: f32) -> f32 {
            return x
        }

        block Outer<H: Dim> {
            sub b: Box<H>
            sub c: helpers.Box<H>
            pub fn f(x: Tensor[H; f32]) -> Tensor[H; f32] {
                let y = b.secret(x)
                let z = helpers.hidden(1.0)
                let q = helpers.nothing
                let t: helpers.Secret = 1.0
                return b.forward(x)
            }
        }
        """,
        std_root,
    )
    got = [(d.code, *position(d)) for d in program.diagnostics]
    assert got == [
        ("E1203", 2, 28),  # importing a private item
        ("E1201", 2, 36),  # importing an item that does not exist
        ("E1204", 5, 4),  # the item after the import of the same name
        ("E1203", 13, 19),  # a private method of a block from another module
        ("E1203", 14, 25),  # a private item through the module name
        ("E1201", 15, 25),
        ("E1201", 16, 24),  # an unknown qualified type
    ]
    private = program.diagnostics[0]
    assert private.related[0].text == "declared here without `pub`"
    assert private.related[0].span.file.path.endswith("helpers.linnet")
    clash = program.diagnostics[2]
    assert clash.label == "redefined here"
    assert clash.related[0].text == "first defined here"


def test_module_import_and_aliases_are_used(std_root: Path) -> None:
    clean(
        """
        module t.a
        use std.helpers
        use std.helpers::{open_fn as opened}

        pub fn f(x: f32) -> f32 {
            return helpers.open_fn(x) + opened(x)
        }
        """,
        std_root,
    )


def test_import_alias_cannot_be_a_prelude_name(std_root: Path) -> None:
    program = check(
        """
        module t.a
        use std.helpers::{open_fn as exp}
        """,
        std_root,
    )
    assert [(d.code, *position(d)) for d in program.diagnostics] == [("E1207", 2, 30)]
    assert program.diagnostics[0].notes == (
        "built-in prelude names are off limits for declarations",
    )


def test_unknown_name_help_mentions_self() -> None:
    program = check(
        """
        module t.a
        block B<H: Dim> {
            param w: Tensor[H; f32]
            pub fn f(x: Tensor[H; f32]) -> Tensor[H; f32] {
                return x * wieght
            }
        }
        """
    )
    (d,) = program.diagnostics
    assert d.code == "E1201" and position(d) == (5, 20)
    assert "no `self`" in d.help[0]


def test_prelude_function_used_as_value_has_a_note() -> None:
    program = check(NAME_CASES["e1201_prelude_as_value"][0])
    assert program.diagnostics[0].notes == ("`exp` is a prelude function; call it: `exp(...)`",)


def test_lints_only_without_errors() -> None:
    source = """
        module t.a
        fn f(x: f32) -> f32 {
            let unused = x
            return y
        }
    """
    assert [d.code for d in check(source).diagnostics] == ["E1201"]


def test_lints() -> None:
    program = check(
        """
        module t.a
        use std.nn.linear::{linear}
        use std.random
        block B<H: Dim> {
            param used: Tensor[H; f32]
            param unused: Tensor[H; f32]
            param _quiet: Tensor[H; f32]
            pub fn f(x: Tensor[H; f32]) -> Tensor[H; f32] {
                let y = x * used
                let z = y
                let _ok = y
                var w = y
                w = x
                static for k in 0..3 {
                    let q = 1
                }
                return y
            }
        }
        """
    )
    got = [(d.code, *position(d), d.severity) for d in program.diagnostics]
    assert got == [
        ("W1001", 2, 21, "warning"),
        ("W1001", 3, 9, "warning"),
        ("W1003", 6, 11, "warning"),
        ("W1002", 10, 13, "warning"),
        ("W1002", 12, 13, "warning"),  # assigned but never read
        ("W1002", 14, 20, "warning"),
        ("W1002", 15, 17, "warning"),
    ]
    assert program.diagnostics[3].help == (
        "start the name with `_` (`_z`) if it is unused on purpose",
    )


def test_member_read_through_a_parent_is_a_use() -> None:
    clean(
        """
        module t.a
        block Child<H: Dim> {
            param w: Tensor[H; f32]
        }
        pub block Parent<H: Dim> {
            sub c: Child<H>
            pub entry f(x: Tensor[H; f32]) -> Tensor[H; f32] {
                return x * c.w
            }
        }
        """
    )


def test_failed_import_has_no_follow_ups(std_root: Path) -> None:
    program = check(
        """
        module t.a
        use std.helpers::{opne_fn, hidden}
        pub fn f(x: f32) -> f32 {
            let a: opne_fn = 1.0
            return opne_fn(x) + hidden(x) + opne_fn
        }
        """,
        std_root,
    )
    assert [(d.code, *position(d)) for d in program.diagnostics] == [
        ("E1201", 2, 19),
        ("E1203", 2, 28),
    ]
