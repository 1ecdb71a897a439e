"""The checker on runtime `for` loops and scans (language-extensions 1.2, 1.3).

The conformance corpus (x1_ cases) has one valid and one invalid program per
rule; these tests look at what the corpus cannot: the stacked types, literal
adoption from the context, the recorded `ForInfo`, and W1002.
"""

from __future__ import annotations

from checker_support import check, clean, findings, only

from linnet.check.types import ScalarType, TensorType, TupleType, show
from linnet.syntax import ast


def _scan_types(text: str) -> list[str]:
    program = clean(text)
    return [show(t).strip("`") for e, t in program.types.items() if isinstance(e, ast.ForLoop)]


def test_stacked_types() -> None:
    text = """
        module m
        pub fn f<N: Dim, D: Dim>(x: Tensor[D; f32]) -> Tensor[N, D; f32] {
            let a = for i in 0..N {
                yield x[i]
            }
            let b = for k in 2..5 {
                yield (k * k, x)
            }
            let (_c, _d) = b
            let e: Tensor[N; f32] = a
            return for _i in 0..N {
                yield x + e[0]
            }
        }
    """
    assert _scan_types(text) == [
        "Tensor[N; f32]",
        "(Tensor[3; i64], Tensor[3, D; f32])",
        "Tensor[N, D; f32]",
    ]


def test_literal_yields_adopt_the_expected_dtype() -> None:
    text = """
        module m
        pub fn f() -> Tensor[4; bf16] {
            let a: (Tensor[3; i8], Tensor[3; f32]) = for _k in 1..4 {
                yield (1, 0.5)
            }
            let (_a0, _a1) = a
            let b = for _k in 0..2 {
                yield 1.5
            }
            let _c: Tensor[2; f64] = b
            return for _k in 0..4 {
                yield 2.0
            }
        }
    """
    assert _scan_types(text) == [
        "(Tensor[3; i8], Tensor[3; f32])",
        "Tensor[2; f64]",
        "Tensor[4; bf16]",
    ]


def test_a_literal_that_does_not_fit_is_reported_once() -> None:
    d = only(
        """
        module m
        pub fn f() -> Tensor[2; u8] {
            return for _k in 0..2 {
                yield 300
            }
        }
        """
    )
    assert d.code == "E2105"


def test_for_info_records_bounds_variable_and_yield_type() -> None:
    program = check(
        """
        module m
        pub fn f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N - 1; f32] where N > 0 {
            return for k in 1..N {
                yield x[k] - x[k - 1]
            }
        }
        """
    )
    (info,) = program.runtime_fors.values()
    assert (str(info.start), str(info.stop)) == ("1", "N")
    assert info.variable is not None and info.variable.name == "k"
    assert isinstance(info.yield_type, ScalarType) and str(info.yield_type) == "f32"


def test_statement_loop_records_no_yield_type_and_carries_vars() -> None:
    program = clean(
        """
        module m
        pub fn f(x: Tensor[4; f32]) -> Tensor[4; f32] {
            var y = x
            for i in 0..4 {
                y = y + x[i]
            }
            return y
        }
        """
    )
    (info,) = program.runtime_fors.values()
    assert info.yield_type is None


def test_unused_loop_variable_is_w1002_unless_underscored() -> None:
    text = """
        module m
        pub fn f(x: Tensor[4; f32]) -> Tensor[4; f32] {
            var y = x
            for NAME in 0..4 {
                y = y * 2.0
            }
            return y
        }
    """
    assert findings(text.replace("NAME", "step")) == [("W1002", 4, 9)]
    clean(text.replace("NAME", "_step"))


def test_carried_var_keeps_its_type() -> None:
    d = only(
        """
        module m
        pub fn f(x: Tensor[4; f32]) -> Tensor[4; f32] {
            var y = x
            for _i in 0..4 {
                y = cast<f64>(y)
            }
            return y
        }
        """
    )
    assert d.code == "E2109"


def test_types_are_tensor_types() -> None:
    program = clean(
        """
        module m
        pub fn f(x: Tensor[4; f32]) -> (Tensor[2; i64], Tensor[2, 4; f32]) {
            return for i in 0..2 {
                yield (i, x)
            }
        }
        """
    )
    (t,) = [t for e, t in program.types.items() if isinstance(e, ast.ForLoop)]
    assert isinstance(t, TupleType)
    assert all(isinstance(x, TensorType) for x in t.elems)
