"""Binding: root generics, the instantiated tree, optional groups, entry generics (language.md 6.7, 12).

The error tests pin the messages users see: each names the generic, the
clause with its values, or the input at fault.
"""

from __future__ import annotations

import numpy as np
import pytest
from lower_support import bound, checked, t

from linnet.errors import LinnetError
from linnet.ir.bind import bind, bind_entry_generics, module_entry

MODEL = """
module t

pub block Leaf<H: Dim, T: Float> {
    param weight: Tensor[H, H; T]
    param bias: Tensor[H; T]? = none
    state seen: Tensor[H; T]
}

pub block Pair<H: Dim, T: Float> {
    sub left: Leaf<H, T>
    sub right: Leaf<2 * H, T>? = none
}

pub block Model<H: Dim, Heads: Dim, Inner: Dim = 4 * H, Depth: Dim = 2, T: Float = f32>
where
    Heads > 0,
    H % Heads == 0
{
    sub blocks: [Pair<H, T>; Depth]
    sub head: Pair<Inner / Heads, T>? = none
    param scale: Tensor[Heads, H / Heads; T]

    pub entry forward<B: Dim, S: Dim>(x: Tensor[B, S, H; T], at: i32) -> Tensor[B, S, H; T] {
        return x
    }

    pub entry wide<*Lead: Shape, U: DType>(x: Tensor[*Lead, H; U], y: Tensor[*Lead, 2; U]) -> Tensor[*Lead, H; U] {
        return x
    }

    pub entry sized<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32]
    where N > 1 {
        return x
    }

    pub entry made<N: Dim>() -> Tensor[N; f32] {
        return fill<f32>([N], 1.0)
    }
}

pub block Other<H: Dim> {
    param w: Tensor[H; f32]
}
"""


def test_paths_types_and_defaults_left_to_right() -> None:
    model = bound(MODEL, {"H": 8, "Heads": 2})
    assert model.generics == {"H": 8, "Heads": 2, "Inner": 32, "Depth": 2, "T": "f32"}
    assert model.tensors["blocks.1.left.weight"].type == t((8, 8))
    assert model.tensors["blocks.0.right.weight"].type == t((16, 16))
    assert model.tensors["head.left.weight"].type == t((16, 16))
    assert model.tensors["scale"].type == t((2, 4))
    assert model.tensors["blocks.0.left.seen"].kind == "state"
    assert [p for p in model.tensors if p.startswith("blocks.0.")] == [
        "blocks.0.left.weight", "blocks.0.left.bias", "blocks.0.left.seen",
        "blocks.0.right.weight", "blocks.0.right.bias", "blocks.0.right.seen",
    ]  # fmt: skip
    model = bound(MODEL, {"H": 4, "Heads": 4, "Depth": 1, "T": "bf16", "Inner": 8})
    assert model.tensors["head.left.weight"].type == t((2, 2), "bf16")
    assert "blocks.1.left.weight" not in model.tensors


def test_optional_groups_and_presence() -> None:
    model = bound(MODEL, {"H": 8, "Heads": 2})
    subs = model.optional_subs
    assert subs["blocks.0.right"].mandatory == ("blocks.0.right.weight",)
    assert subs["head"].mandatory == ("head.left.weight",)
    assert subs["head.right"].mandatory == ("head.right.weight",)
    assert subs["head.right"].parent == "head"
    assert model.tensors["head.right.bias"].group == "head.right"
    assert model.tensors["blocks.0.left.bias"].optional
    every = {p for p, bt in model.tensors.items() if bt.kind != "state"}
    assert model.present_paths(every) == every
    # Without head.left.weight the whole optional head is absent, nested child included.
    partial = every - {"head.left.weight"}
    present = model.present_paths(partial)
    assert not any(p.startswith("head.") for p in present)
    assert not model.sub_present("head.right", partial)
    assert model.sub_present("blocks.1.right", partial)
    live_state = model.live_tensors(partial, "state")
    assert "head.left.seen" not in live_state and "blocks.0.right.seen" in live_state


def test_missing_unknown_and_ill_kinded_generics() -> None:
    program = checked(MODEL)
    with pytest.raises(LinnetError, match="missing generic `Heads` for block `Model`"):
        bind(program, generics={"H": 8})
    with pytest.raises(LinnetError, match=r"unknown generic `Hidden` .*H, Heads, Inner, Depth, T"):
        bind(program, generics={"H": 8, "Heads": 2, "Hidden": 3})
    with pytest.raises(LinnetError, match="`T` of block `Model` must be Float"):
        bind(program, generics={"H": 8, "Heads": 2, "T": "i32"})
    with pytest.raises(LinnetError, match="expected a dtype such as `f32`, `float32`"):
        bind(program, generics={"H": 8, "Heads": 2, "T": "float"})
    with pytest.raises(LinnetError, match="non-negative integer"):
        bind(program, generics={"H": -8, "Heads": 2})
    with pytest.raises(LinnetError, match="non-negative integer"):
        bind(program, generics={"H": True, "Heads": 2})


def _dtype_spellings() -> list[tuple[object, str]]:
    """What users pass for a dtype generic, each with the Linnet dtype it means."""
    import ml_dtypes

    # JAX's scalar types (`jnp.bfloat16`) are classes carrying a NumPy `dtype`; JAX is no
    # dependency of the project, so a class of that shape stands in for one.
    jax_like = type("bfloat16", (), {"dtype": np.dtype(ml_dtypes.bfloat16)})
    spellings: list[tuple[object, str]] = [
        ("f32", "f32"),
        ("float32", "f32"),
        ("bfloat16", "bf16"),
        ("float16", "f16"),
        (np.float32, "f32"),
        (np.dtype("float64"), "f64"),
        (ml_dtypes.bfloat16, "bf16"),
        (jax_like, "bf16"),
    ]
    try:
        import torch
    except ImportError:
        return spellings
    return [*spellings, (torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.half, "f16")]


@pytest.mark.parametrize(("given", "dtype"), _dtype_spellings())
def test_dtype_generics_accept_numpy_torch_and_jax_spellings(given: object, dtype: str) -> None:
    model = bind(checked(MODEL), generics={"H": 8, "Heads": 2, "T": given})
    assert model.generics["T"] == dtype
    assert model.tensors["scale"].type.dtype == dtype


def test_dtype_generics_refuse_what_is_no_dtype_of_the_class() -> None:
    program = checked(MODEL)
    with pytest.raises(LinnetError, match=r"must be Float, but `i64` \(numpy.int64\) is not"):
        bind(program, generics={"H": 8, "Heads": 2, "T": np.int64})
    for wrong in (np.zeros(3, np.float32), None, float, "i8x", np.complex64):
        with pytest.raises(LinnetError, match="expected a dtype such as"):
            bind(program, generics={"H": 8, "Heads": 2, "T": wrong})


def test_failing_where_names_the_clause_and_values() -> None:
    program = checked(MODEL)
    with pytest.raises(
        LinnetError, match=r"constraint H % Heads == 0 does not hold for H=5, Heads=2"
    ):
        bind(program, generics={"H": 5, "Heads": 2})
    with pytest.raises(LinnetError, match=r"constraint Heads > 0 does not hold for Heads=0"):
        bind(program, generics={"H": 5, "Heads": 0})


def test_root_selection() -> None:
    program = checked(MODEL)
    assert bind(program, generics={"H": 2, "Heads": 1}).root.info.name == "Model"
    other = bind(program, root="Other", generics={"H": 3})
    assert list(other.tensors) == ["w"] and other.entries == {}
    with pytest.raises(
        LinnetError, match=r"no block named `Nope`.*`Leaf`, `Pair`, `Model`, `Other`"
    ):
        bind(program, root="Nope", generics={})
    two = checked(
        """
        module t
        pub block A { pub entry f(x: f32) -> f32 { return x } }
        pub block B { pub entry g(x: f32) -> f32 { return x } }
        """
    )
    with pytest.raises(LinnetError, match=r"several blocks have entries \(`A`, `B`\)"):
        bind(two, generics={})
    none = checked("module t\npub block A { param w: Tensor[2; f32] }\n")
    with pytest.raises(LinnetError, match="no block of the root file has an `entry`"):
        bind(none, generics={})


def test_shape_pack_root_generics() -> None:
    program = checked(
        """
        module t
        pub block Grid<*S: Shape, T: DType = f32> {
            param w: Tensor[*S, 2; T]
            pub entry get() -> Tensor[*S, 2; T] { return w }
        }
        """
    )
    assert bind(program, generics={"S": [3, 4]}).tensors["w"].type == t((3, 4, 2))
    assert bind(program, generics={"S": "3,4"}).tensors["w"].type == t((3, 4, 2))
    model = bind(program, generics={"S": [], "T": "bool"})
    assert model.tensors["w"].type == t((2,), "bool")
    assert model.generics["S"] == ()
    with pytest.raises(LinnetError, match="expected non-negative integers"):
        bind(program, generics={"S": [3, -1]})


def test_entry_generics_from_inputs() -> None:
    model = bound(MODEL, {"H": 8, "Heads": 2})
    forward = model.entries["forward"]
    assert [s.name for s in forward.inputs] == ["x", "at"]
    binding = bind_entry_generics(forward, [t((2, 5, 8)), t((), "i32")])
    assert binding.values == {"B": 2, "S": 5}
    wide = bind_entry_generics(model.entries["wide"], [t((3, 4, 8), "f16"), t((3, 4, 2), "f16")])
    assert wide.values == {"Lead": (3, 4), "U": "f16"}
    made = bind_entry_generics(model.entries["made"], [], {"N": 3})
    assert made.values == {"N": 3}


def test_entry_input_errors_name_the_input() -> None:
    model = bound(MODEL, {"H": 8, "Heads": 2})
    forward = model.entries["forward"]
    with pytest.raises(LinnetError, match="input `x` has dtype f16 but f32 is required"):
        bind_entry_generics(forward, [t((2, 5, 8), "f16"), t((), "i32")])
    with pytest.raises(LinnetError, match=r"input `x` has rank 2 but .* needs 3 axes"):
        bind_entry_generics(forward, [t((2, 8)), t((), "i32")])
    with pytest.raises(LinnetError, match=r"input `x`: axis 2 is 7 but `H` = 8 is required"):
        bind_entry_generics(forward, [t((2, 5, 7)), t((), "i32")])
    with pytest.raises(LinnetError, match="input `at` has dtype i64 but i32 is required"):
        bind_entry_generics(forward, [t((2, 5, 8)), t((), "i64")])
    with pytest.raises(LinnetError, match="missing input `at`"):
        bind_entry_generics(forward, [t((2, 5, 8))])
    wide = model.entries["wide"]
    with pytest.raises(
        LinnetError, match=r"input `y`: .*\[3, 5\] here but \[3, 4\] from input `x`"
    ):
        bind_entry_generics(wide, [t((3, 4, 8), "f16"), t((3, 5, 2), "f16")])
    with pytest.raises(LinnetError, match="input `y` has dtype f32, but `U` is f16 from input `x`"):
        bind_entry_generics(wide, [t((3, 4, 8), "f16"), t((3, 4, 2), "f32")])
    with pytest.raises(LinnetError, match=r"constraint N > 1 does not hold for N=1"):
        bind_entry_generics(model.entries["sized"], [t((1,))])
    with pytest.raises(LinnetError, match="cannot bind generic `N`"):
        bind_entry_generics(model.entries["made"], [])


def test_conflicting_dimensions_between_inputs() -> None:
    model = bound(
        """
        module t
        pub block M<H: Dim> {
            pub entry f<B: Dim>(x: Tensor[B, H; f32], y: Tensor[B; i64]) -> Tensor[B; i64] {
                return y
            }
            pub entry g<D: Dim>(x: Tensor[2 * D + 1; f32]) -> Tensor[2 * D + 1; f32] {
                return x
            }
        }
        """,
        {"H": 4},
    )
    with pytest.raises(
        LinnetError, match=r"input `y`: dimension `B` \(axis 0\) is 3 here but 2 from input `x`"
    ):
        bind_entry_generics(model.entries["f"], [t((2, 4)), t((3,), "i64")])
    assert bind_entry_generics(model.entries["g"], [t((7,))]).values == {"D": 3}
    with pytest.raises(LinnetError, match=r"input `x`: axis 0 is 6"):
        bind_entry_generics(model.entries["g"], [t((6,))])


def test_module_level_entries() -> None:
    program = checked(
        """
        module t
        pub entry loss<N: Dim>(a: Tensor[N; f32], b: Tensor[N; f32]) -> f32 {
            return sum[n] a[n] * b[n]
        }
        """
    )
    sig = module_entry(program, "t", "loss")
    assert bind_entry_generics(sig, [t((3,)), t((3,))]).values == {"N": 3}
    with pytest.raises(LinnetError, match="no module `nowhere`"):
        module_entry(program, "nowhere", "loss")


def test_programs_with_errors_do_not_bind() -> None:
    from linnet.pipeline import check_source

    program = check_source("module t\npub block A { pub entry f(x: f32) -> f32 { return y } }\n")
    with pytest.raises(LinnetError, match="cannot bind a program with errors"):
        bind(program, generics={})


def test_docstring_examples() -> None:
    import doctest

    import linnet.ir.bind
    import linnet.ir.lower

    for module in (linnet.ir.bind, linnet.ir.lower):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
