"""Blocks, members, state, manifests (language.md 12; 16.2 E41xx).

Each case is a whole module and the exact list of findings it must produce,
as (code, line, column) of the primary span in the sorted order of 16.5: no
finding may be missing, and no follow-up error may appear.
"""

from __future__ import annotations

import pytest
from checker_support import Finding, check, clean, findings

from linnet.check.decls import FnInfo
from linnet.check.program import ManifestEntry

MEMBER_CASES: dict[str, tuple[str, list[Finding]]] = {
    "e4101_members": (
        """\
module t.a
block Inner<H: Dim> {
    param w: Tensor[H; f32]
}
block B<H: Dim> {
    param a: f32
    buffer b: (Tensor[H; f32], f32)
    state c: Tensor[H; f32]?
    state d: i32
    sub e: Tensor[H; f32]
    param f: Tensor[H; f32] = none
    sub g: Inner<H> = none
    sub h: [Inner<H>; 2]?
}
""",
        [
            ("E4101", 6, 14),
            ("E4101", 7, 15),
            ("E4101", 8, 14),
            ("E4101", 9, 14),
            ("E4101", 10, 12),
            ("E4101", 11, 31),
            ("E4101", 12, 23),
            ("E4101", 13, 12),
        ],
    ),
    "e4102_payload": (
        """\
module t.a
block B<H: Dim> {
    param w: Tensor[H; f32] = zeros(H)
    param v: Tensor[H; f32]? = 1.0
}
""",
        [("E4102", 3, 31), ("E4102", 4, 32)],
    ),
}


@pytest.mark.parametrize("name", sorted(MEMBER_CASES))
def test_findings(name: str) -> None:
    source, expected = MEMBER_CASES[name]
    assert findings(source) == expected


def test_e4102_note() -> None:
    d = check(MEMBER_CASES["e4102_payload"][0]).diagnostics[0]
    assert "none` is the only permitted default" in d.notes[0]


def test_e4101_help_for_none_default() -> None:
    d = check(MEMBER_CASES["e4101_members"][0]).diagnostics[5]
    assert d.help == ("declare the type as `Tensor[H; f32]?`",)


def test_param_default_call_of_unknown_function_is_only_e4102() -> None:
    program = check(
        """
        module t.a
        block B<H: Dim> {
            param w: Tensor[H; f32] = make_weights(H)
        }
        """
    )
    assert [d.code for d in program.diagnostics] == ["E4102"]


TOWER = """
module examples.tower

pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    buffer stats: Tensor[2, H; f32]?

    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return match stats {
            some(s) => x * gain + s[0]
            none => x * gain
        }
    }
}

pub block Tower<H: Dim, Depth: Dim, T: Float = f32> {
    sub stem: Scale<2 * H>
    sub stages: [Scale<H>; Depth]
    sub extra: Scale<H>? = none
    state steps: Tensor[1; T]

    pub entry forward<B: Dim>(x: Tensor[B, 2 * H; f32]) -> Tensor[B, 2 * H; f32] {
        steps = steps + 1.0
        let y = stem.forward(x)
        var z = y[:, 0:H]
        static for stage in stages {
            z = stage.forward(z)
        }
        let w = match extra {
            some(last) => last.forward(z)
            none => z
        }
        return concat(w, w, axis = 1)
    }
}
"""


def test_manifest_paths_kinds_shapes_repeats_and_optionals() -> None:
    program = clean(TOWER)
    (key,) = program.graph.roots
    manifests = {m.name: m for m in program.manifest(key)}
    assert set(manifests) == {"Scale", "Tower"}
    tower = manifests["Tower"]
    assert (tower.module, tower.generics) == ("examples.tower", ["H", "Depth", "T"])
    assert tower.entries == [
        ManifestEntry("stem.gain", "param", "f32", ["2 * H"], [], False),
        ManifestEntry("stem.stats", "buffer", "f32", ["2", "2 * H"], [], True),
        ManifestEntry("stages[*].gain", "param", "f32", ["H"], ["Depth"], False),
        ManifestEntry("stages[*].stats", "buffer", "f32", ["2", "H"], ["Depth"], True),
        ManifestEntry("extra.gain", "param", "f32", ["H"], [], True),
        ManifestEntry("extra.stats", "buffer", "f32", ["2", "H"], [], True),
        ManifestEntry("steps", "state", "T", ["1"], [], False),
    ]


def test_manifest_of_nested_arrays_and_packs() -> None:
    program = clean(
        """
        module t.a
        pub block Leaf<*S: Shape, H: Dim> {
            param w: Tensor[*S, H; f32]
            pub fn f(x: Tensor[*S, H; f32]) -> Tensor[*S, H; f32] {
                return x * w
            }
        }
        pub block Mid<H: Dim> {
            sub leaves: [Leaf<[2, H], H>; 3]
            pub fn f(x: Tensor[2, H, H; f32]) -> Tensor[2, H, H; f32] {
                var y = x
                static for leaf in leaves {
                    y = leaf.f(y)
                }
                return y
            }
        }
        pub block Top<H: Dim, L: Dim> {
            sub mids: [Mid<H>; L]
            pub entry f(x: Tensor[2, H, H; f32]) -> Tensor[2, H, H; f32] {
                return mids[0].f(x)
            }
        }
        """
    )
    top = next(m for m in program.manifest(program.graph.roots[0]) if m.name == "Top")
    assert top.entries == [
        ManifestEntry("mids[*].leaves[*].w", "param", "f32", ["2", "H", "H"], ["L", "3"], False)
    ]
    leaf = next(m for m in program.manifest(program.graph.roots[0]) if m.name == "Leaf")
    assert leaf.generics == ["*S", "H"]
    assert leaf.entries[0].shape == ["*S", "H"]


def test_no_manifest_with_errors() -> None:
    program = check(MEMBER_CASES["e4101_members"][0])
    assert program.manifest(program.graph.roots[0]) == []


MEMORY = """
module examples.memory

pub block Recorder<Slots: Dim, D: Dim> {
    state slots: Tensor[Slots, D; f32]
    state writes: Tensor[1; i64]

    pub fn write(value: Tensor[D; f32], at: i32) -> Tensor[Slots, D; f32] {
        let index = iota<i32>(Slots)
        let updated[s, d] = select(index[s] == at, value[d], slots[s, d])
        slots = updated
        writes = writes + 1
        return slots
    }
}

pub block Agent<Slots: Dim, D: Dim>
where Slots > 0 {
    sub memory: Recorder<Slots, D>
    sub layers: [Recorder<Slots, D>; 2]

    pub entry step(value: Tensor[D; f32], at: i32) -> Tensor[D; f32] {
        let table = memory.write(value, at)
        var acc = table[0]
        static for layer in layers {
            acc = acc + layer.write(value, at)[0]
        }
        return acc + memory.slots[0]
    }
}
"""


def test_state_footprints() -> None:
    program = clean(MEMORY)
    fns = {fn.qualified_name: fn for fn in program.functions.values()}
    write = program.state_footprint(fns["examples.memory::Recorder.write"])
    assert write.reads == {("slots",), ("writes",)}
    assert write.writes == {("slots",), ("writes",)}
    step = program.state_footprint(fns["examples.memory::Agent.step"])
    assert step.writes == {
        ("memory", "slots"),
        ("memory", "writes"),
        ("layers", "*", "slots"),
        ("layers", "*", "writes"),
    }
    assert ("memory", "slots") in step.reads


def test_state_is_assigned_only_with_its_type() -> None:
    program = check(
        """
        module t.a
        block B<H: Dim> {
            state s: Tensor[H; f32]
            pub fn f(x: Tensor[H; f16]) -> Tensor[H; f32] {
                s = x
                return s
            }
        }
        """
    )
    assert [(d.code, d.span.text if d.span else "") for d in program.diagnostics] == [
        ("E2109", "x")
    ]


def test_call_records_receiver_and_substitution() -> None:
    program = clean(MEMORY)
    calls = [info for info in program.calls.values() if isinstance(info.callee, FnInfo)]
    receivers = sorted(info.receiver_path for info in calls)
    assert receivers == [("layers", "*"), ("memory",)]
    for info in calls:
        assert repr(info.result) == "Tensor[Slots, D; f32]"


def test_block_containing_itself() -> None:
    program = check(
        """
        module t.a
        block Tree<H: Dim> {
            param w: Tensor[H; f32]
            sub child: Tree<H>? = none
        }
        """
    )
    assert [d.code for d in program.diagnostics] == ["E2122"]


def test_sub_where_must_be_proven() -> None:
    program = check(
        """
        module t.a
        block G<H: Dim, N: Dim>
        where
            N > 0,
            H % N == 0
        {
            param w: Tensor[N, H / N; f32]
        }
        pub block Ok<H: Dim>
        where H % 4 == 0 {
            sub g: G<H, 4>
        }
        pub block Bad<H: Dim> {
            sub g: G<H, 4>
        }
        """
    )
    assert [(d.code, d.span.text if d.span else "") for d in program.diagnostics] == [
        ("E2206", "G<H, 4>")
    ]


def test_aliases_of_block_types_prove_where_at_each_use() -> None:
    program = check(
        """
        module t.a
        block G<H: Dim, N: Dim>
        where
            N > 0,
            H % N == 0
        {
            param w: Tensor[N, H / N; f32]
        }
        type Quarter<H: Dim> = G<H, 4>
        type Stack<H: Dim, L: Dim> = [G<H, 2>; L]
        pub block Ok<H: Dim>
        where H % 4 == 0 {
            sub g: Quarter<H>
            sub s: Stack<H, 3>
        }
        pub block Bad<H: Dim> {
            sub g: Quarter<H>
        }
        fn f(x: Stack<4, 3>) -> f32 {
            return 0.0
        }
        """
    )
    assert [(d.code, d.span.text if d.span else "") for d in program.diagnostics] == [
        ("E2206", "Quarter<H>"),
        ("E2101", "Stack<4, 3>"),
    ]
