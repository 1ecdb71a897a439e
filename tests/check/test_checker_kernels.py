"""Kernel checks beyond the corpus's one-code cases (language-extensions 4.2-4.4)."""

from __future__ import annotations

from checker_support import check, clean, only, position

from linnet.syntax import ast


def test_mixed_writes_point_at_the_earlier_write() -> None:
    d = only(
        """
        module m
        kernel twice(x: Tensor[8; f32]) -> y: Tensor[8; f32] grid(2) {
            let i = iota<i32>(8)
            store(y[i], load(x[i]))
            atomic_add(y[i], load(x[i]))
        }
        """
    )
    assert d.code == "E2127" and position(d) == (5, 5)
    assert [(r.text, r.span.text.split("(")[0]) for r in d.related] == [("earlier write", "store")]


def test_kernel_name_is_not_a_value() -> None:
    d = only(
        """
        module m
        kernel k(x: Tensor[8; f32]) -> y: Tensor[8; f32] grid(1) {
            store(y[iota<i32>(8)], load(x[iota<i32>(8)]))
        }
        fn f() -> i32 {
            let g = k
            return 1
        }
        """
    )
    assert d.code == "E1208" and "kernel" in d.message


def test_reference_records_the_binding_and_omitted_defaults() -> None:
    program = clean(
        """
        module m
        pub kernel scaled<N: Dim, B: Dim = 64>(x: Tensor[N; f32]) -> y: Tensor[N; f32] grid((N + B - 1) / B)
        where B > 0 {
            let offs = program_id(0) * B + iota<i32>(B)
            store(y[offs], load(x[offs], offs < N) * 2.0, offs < N)
        }
        pub op double<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] kernel scaled<N> {
            return x * 2.0
        }
        """
    )
    ((decl, binding),) = program.kernel_refs.items()
    assert isinstance(decl, ast.FnDecl) and decl.name.name == "double"
    assert binding.kernel.name == "scaled" and binding.kernel.warps is None
    assert sorted(str(v) for v in binding.subst.dims.values()) == ["64", "N"]


def test_mismatched_reference_is_reported_per_difference_and_not_recorded() -> None:
    program = check(
        """
        module m
        kernel halve(x: Tensor[16; f32]) -> y: Tensor[16; f32] grid(1) {
            let i = iota<i32>(16)
            store(y[i], load(x[i]) * 0.5)
        }
        op half(x: Tensor[8; f32]) -> Tensor[8; f32] kernel halve { return x * 0.5 }
        """
    )
    found = [(d.code, d.span.text if d.span else "") for d in program.diagnostics]
    assert found == [("E2126", "kernel halve")] * 2  # 4.9: the parameter and the result
    assert program.kernel_refs == {}


def test_builtins_are_ordinary_names_when_declared() -> None:
    # B17: outside kernels `load` is whatever the module declares
    clean(
        """
        module m
        fn load(x: f32) -> f32 {
            return x
        }
        pub entry main(x: f32) -> f32 {
            return load(x)
        }
        """
    )
