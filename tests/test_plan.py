"""The plan JSON (language.md 19): structure, manifests, encodings, determinism.

Every example program of language.md (the `spec_*` conformance files) is
planned and checked against the checker's own tables: the manifest paths
against `CheckedProgram.manifest`, the listed functions against the module's
declarations and every callee, and each region against a small verifier
(unique ids, every operand defined before its use in the same or an
enclosing region). Dimension encodings are checked by evaluating the JSON
with an evaluator written here and comparing with `Dim.evaluate`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linnet.check.dims import Dim, Symbol
from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.pipeline import check_paths, check_source
from linnet.plan import build_plan, plan_json
from linnet.plan.values import Numbering, ValueEncoder

ROOT = Path(__file__).resolve().parents[1]
VALID = ROOT / "tests" / "conformance" / "valid"
SPEC_EXAMPLES = sorted(VALID.glob("spec_*.linnet"))
ALL_VALID = sorted(VALID.glob("*.linnet"))

TOP_KEYS = [
    "version", "module", "numerics", "optimized", "root", "manifest", "blocks", "functions",
    "constants",
]  # fmt: skip


def checked(path: Path) -> CheckedProgram:
    program = check_paths([path])
    assert not program.has_errors, path
    return program


def plan_of(path: Path, **options: Any) -> dict[str, Any]:
    return build_plan(checked(path), **options)


# -- a verifier for plan regions -------------------------------------------------------


def regions_of(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for fn in plan["functions"]:
        yield fn["body"]
    for const in plan["constants"]:
        yield const["body"]


def verify_region(region: dict[str, Any], visible: set[int], seen: set[int]) -> None:
    """Ids unique in the document; operands defined earlier here or in an enclosing region."""
    scope = set(visible)
    for arg in region["args"]:
        assert arg["id"] not in seen, f"id {arg['id']} defined twice"
        seen.add(arg["id"])
        scope.add(arg["id"])
        assert set(arg) == {"id", "name", "type"}
    for op in region["ops"]:
        assert set(op) == {"kind", "operands", "results", "attrs", "regions"}
        for operand in op["operands"]:
            assert operand in scope, f"{op['kind']} uses %{operand} before its definition"
        for inner in op["regions"]:
            verify_region(inner, scope, seen)
        for result in op["results"]:
            assert result["id"] not in seen, f"id {result['id']} defined twice"
            seen.add(result["id"])
            scope.add(result["id"])
    terminators = [op["kind"] for op in region["ops"] if op["kind"] in ("yield", "return")]
    assert terminators and region["ops"][-1]["kind"] == terminators[0], "region must end once"
    assert len(terminators) == 1


def all_ops(region: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for op in region["ops"]:
        yield op
        for inner in op["regions"]:
            yield from all_ops(inner)


def verify_plan(plan: dict[str, Any]) -> None:
    seen: set[int] = set()
    for region in regions_of(plan):
        verify_region(region, set(), seen)
    names = {fn["name"] for fn in plan["functions"]}
    assert len(names) == len(plan["functions"]), "a function is listed twice"
    constants = {c["name"] for c in plan["constants"]}
    for region in regions_of(plan):
        for op in all_ops(region):
            if op["kind"] in ("call", "semantic.call"):
                assert op["attrs"]["callee"] in names, op["attrs"]["callee"]
            if "constant" in op["attrs"]:
                assert op["attrs"]["constant"] in constants
    for fn in plan["functions"]:
        assert fn["block"] is None or fn["block"] in plan["blocks"]


# -- the examples of language.md -----------------------------------------------------------


@pytest.mark.parametrize("path", SPEC_EXAMPLES, ids=lambda p: p.stem)
def test_spec_examples_plan(path: Path) -> None:
    program = checked(path)
    plan = build_plan(program)
    assert list(plan) == TOP_KEYS
    assert plan["version"] == 1
    module = program.modules[program.graph.roots[0]]
    assert plan["module"] == module.name
    verify_plan(plan)
    # Every function declared in the file is listed, module level and methods.
    listed = {fn["name"] for fn in plan["functions"]}
    for fn in program.functions.values():
        if fn.module is module:
            assert fn.qualified_name in listed
    # json.loads gives the document back, and planning again gives the same bytes.
    text = plan_json(plan)
    assert json.loads(text) == plan
    assert plan_json(build_plan(checked(path))) == text


@pytest.mark.parametrize("path", ALL_VALID, ids=lambda p: p.stem)
@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "no-opt"])
def test_every_valid_conformance_case_plans(path: Path, optimize: bool) -> None:
    verify_plan(plan_of(path, optimize=optimize))


@pytest.mark.parametrize("name", ["spec_tiny", "spec_tower", "spec_memory", "spec_grouped"])
def test_manifest_paths_equal_the_checkers(name: str) -> None:
    program = checked(VALID / f"{name}.linnet")
    plan = build_plan(program)
    root = plan["root"]["name"]
    (block,) = [b for b in program.manifest(program.graph.roots[0]) if b.name == root]
    expected = [(e.path, e.kind, e.optional, len(e.repeat)) for e in block.entries]
    actual = [(e["path"], e["kind"], e["optional"], len(e["repeat"])) for e in plan["manifest"]]
    assert actual == expected


def test_a_llama_with_std_blocks_state_and_caches() -> None:
    source = ROOT / "tests" / "torch" / "data" / "llama.linnet"
    if not source.exists():
        pytest.skip("the torch backend's Llama test model is not in this checkout")
    program = checked(source)
    plan = build_plan(program)
    verify_plan(plan)
    (block,) = [b for b in program.manifest(program.graph.roots[0]) if b.name == "Llama"]
    assert [e["path"] for e in plan["manifest"]] == [e.path for e in block.entries]
    assert "layers[*].self_attn.k_cache" in [e["path"] for e in plan["manifest"]]
    names = {fn["name"] for fn in plan["functions"]}
    assert {"std.nn.norm::rms_norm", "std.nn.linear::linear"} <= names
    decode = next(fn for fn in plan["functions"] if fn["name"].endswith("Llama.decode"))
    assert any(path.endswith("k_cache") for path in decode["state_writes"])


def test_tiny_manifest_keeps_dimensions_symbolic() -> None:
    plan = plan_of(VALID / "spec_tiny.linnet")
    generics = {g["name"]: g for g in plan["root"]["generics"]}
    assert generics["T"] == {"name": "T", "kind": "dtype", "var": 0, "class": "Float",
                             "default": "f32"}  # fmt: skip
    inner = {"sym": generics["Inner"]["sym"], "name": "Inner"}
    depth = {"sym": generics["Depth"]["sym"], "name": "Depth"}
    entry = next(e for e in plan["manifest"] if e["path"] == "hidden[*].weight")
    assert entry == {
        "path": "hidden[*].weight",
        "kind": "param",
        "dtype": {"var": 0, "name": "T"},
        "shape": [inner, inner],
        "repeat": [depth],
        "optional": False,
    }
    assert [e["path"] for e in plan["manifest"] if e["optional"]] == [
        "input.bias", "hidden[*].bias", "output.bias",
    ]  # fmt: skip
    assert plan["root"]["entries"] == ["examples.tiny::Mlp.forward"]
    assert set(plan["blocks"]) == {"examples.tiny::Mlp", "examples.tiny::Dense"}


def test_tiny_forward_body() -> None:
    plan = plan_of(VALID / "spec_tiny.linnet")
    forward = next(f for f in plan["functions"] if f["name"] == "examples.tiny::Mlp.forward")
    kinds = [op["kind"] for op in forward["body"]["ops"]]
    assert kinds == ["block.sub", "call", "const.float", "max", "block.sub", "static_for",
                     "block.sub", "call", "return"]  # fmt: skip
    loop = forward["body"]["ops"][5]
    assert loop["attrs"]["length"]["name"] == "Depth"
    element, carried = loop["regions"][0]["args"]
    assert element["type"]["kind"] == "block" and carried["type"]["kind"] == "tensor"
    assert [op["kind"] for op in loop["regions"][0]["ops"]] == ["call", "max", "yield"]
    dense = next(f for f in plan["functions"] if f["name"] == "examples.tiny::dense")
    assert dense["kind"] == "op" and [p["name"] for p in dense["params"]] == ["x", "weight", "bias"]
    comprehension, match, _ = dense["body"]["ops"]
    assert comprehension["kind"] == "comprehension"
    assert [i["name"] for i in comprehension["attrs"]["indices"]] == ["l", "o"]
    assert comprehension["attrs"]["indices"][0]["pack"] is True
    (reduce,) = [op for op in all_ops(comprehension["regions"][0]) if op["kind"] == "reduce"]
    assert reduce["attrs"]["kind"] == "sum"
    assert match["kind"] == "option.match" and len(match["regions"]) == 2


def test_numerics_decide_how_ops_are_called() -> None:
    equivalent = plan_of(VALID / "spec_tiny.linnet")
    exact = plan_of(VALID / "spec_tiny.linnet", numerics="exact")
    assert equivalent["numerics"] == "equivalent" and exact["numerics"] == "exact"

    def callee_kinds(plan: dict[str, Any]) -> set[tuple[str, str]]:
        return {
            (op["kind"], op["attrs"]["kind"])
            for region in regions_of(plan)
            for op in all_ops(region)
            if op["kind"] in ("call", "semantic.call")
        }

    assert callee_kinds(equivalent) == {("call", "fn"), ("semantic.call", "op")}
    assert callee_kinds(exact) == {("call", "fn"), ("call", "op")}
    with pytest.raises(LinnetError, match="numerics"):
        build_plan(checked(VALID / "spec_tiny.linnet"), numerics="fast")


def test_state_accesses_keep_program_order() -> None:
    plan = plan_of(VALID / "spec_memory.linnet")
    write = next(f for f in plan["functions"] if f["name"].endswith("Recorder.write"))
    assert write["states"] == ["slots", "writes"] and write["state_writes"] == ["slots", "writes"]
    accesses = [
        (op["kind"], op["attrs"]["member"])
        for op in all_ops(write["body"])
        if op["kind"].startswith("state.")
    ]
    assert accesses == [
        ("state.read", "slots"),
        ("state.write", "slots"),
        ("state.read", "writes"),
        ("state.write", "writes"),
        ("state.read", "slots"),
    ]
    step = next(f for f in plan["functions"] if f["name"].endswith("Agent.step"))
    assert step["states"] == ["memory.slots", "memory.writes"]
    assert step["state_writes"] == ["memory.slots", "memory.writes"]
    call = next(op for op in step["body"]["ops"] if op["kind"] == "call")
    assert call["attrs"]["receiver"] is True and call["attrs"]["stateful"] is True


def test_loops_carry_the_vars_they_assign() -> None:
    plan = plan_of(VALID / "spec_loops.linnet")
    (fn,) = plan["functions"]
    loop = next(op for op in fn["body"]["ops"] if op["kind"] == "while")
    assert [v["name"] for v in loop["results"]] == ["current", "steps", "going"]
    cond, body = loop["regions"]
    assert len(cond["args"]) == len(body["args"]) == 3
    assert cond["ops"][-1]["kind"] == "yield" and len(cond["ops"][-1]["operands"]) == 1
    assert len(body["ops"][-1]["operands"]) == 3
    ret = fn["body"]["ops"][-1]
    assert ret["kind"] == "return" and ret["operands"] == [v["id"] for v in loop["results"][:2]]
    horner = plan_of(VALID / "spec_horner.linnet")["functions"][0]
    loop = next(op for op in horner["body"]["ops"] if op["kind"] == "static_range")
    assert loop["attrs"]["start"] == 0 and loop["attrs"]["stop"]["name"] == "Degree"
    counter = loop["regions"][0]["args"][0]
    assert counter["type"] == {"kind": "scalar", "dtype": "i64"}


def test_constants_and_enum_match() -> None:
    plan = plan_of(VALID / "spec_settings.linnet")
    constants = {c["name"]: c for c in plan["constants"]}
    assert set(constants) == {f"examples.settings::{n}" for n in ("MODE", "EPS", "WINDOW", "HALF")}
    assert constants["examples.settings::HALF"]["contextual"] is True
    assert constants["examples.settings::EPS"]["type"] == {"kind": "scalar", "dtype": "f32"}
    assert constants["examples.settings::WINDOW"]["type"] == {"kind": "dim", "value": 4}
    pool = next(f for f in plan["functions"] if f["name"] == "examples.settings::pool")
    match = next(op for op in pool["body"]["ops"] if op["kind"] == "enum.match")
    assert match["attrs"]["arms"] == [{"variant": v} for v in ("First", "Average", "Peak")]
    scrutinee = next(op for op in pool["body"]["ops"] if op["kind"] == "enum.const")
    assert scrutinee["attrs"] == {"enum": "examples.settings::Reduce", "variant": "Average",
                                  "constant": "examples.settings::MODE"}  # fmt: skip


def test_slices_and_runtime_indices() -> None:
    plan = plan_of(VALID / "spec_slices.linnet")
    fns = {f["name"].split("::")[1]: f for f in plan["functions"]}
    (lanes,) = [op for op in fns["odd_lanes"]["body"]["ops"] if op["kind"] == "slice"]
    whole, last = lanes["attrs"]["axes"]
    assert whole == {"whole": True, "unit": {"pack": whole["unit"]["pack"], "name": "Lead"}}
    assert last["start"] == 1 and last["step"] == 2
    row_col = [op for op in fns["row_col"]["body"]["ops"] if op["kind"] == "slice"]
    squeeze, kept = row_col[0]["attrs"]["axes"]
    assert squeeze == {"squeeze": True, "operand": 1}
    assert kept["whole"] is True and kept["unit"]["name"] == "C"


# -- optimisation ---------------------------------------------------------------------------

DUPLICATES = """\
module m

pub fn f<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    let unused = x * 3.0
    let a = x * 2.0
    let b = x * 2.0
    return a + b
}
"""


def test_optimize_merges_and_drops_values() -> None:
    program = check_source(DUPLICATES)
    assert not program.has_errors
    plain = build_plan(program, optimize=False)["functions"][0]["body"]["ops"]
    optimized = build_plan(program)["functions"][0]["body"]["ops"]
    assert [op["kind"] for op in plain] == ["const.float", "mul", "const.float", "mul",
                                            "const.float", "mul", "add", "return"]  # fmt: skip
    assert [op["kind"] for op in optimized] == ["const.float", "mul", "add", "return"]
    mul = optimized[1]["results"][0]["id"]
    assert optimized[2]["operands"] == [mul, mul]


def test_optimize_keeps_state_reads() -> None:
    source = """\
module m

pub block Counter {
    state count: Tensor[1; i32]

    pub entry peek() -> Tensor[1; i32] {
        let before = count
        let again = count
        return again
    }
}
"""
    program = check_source(source)
    assert not program.has_errors
    ops = build_plan(program)["functions"][0]["body"]["ops"]
    assert [op["kind"] for op in ops] == ["state.read", "state.read", "return"]


# -- roots ----------------------------------------------------------------------------------

TWO_ROOTS = """\
module m

pub block A {
    param w: Tensor[2; f32]
    pub entry run() -> Tensor[2; f32] {
        return w
    }
}

pub block B {
    param v: Tensor[3; f32]
    pub entry run() -> Tensor[3; f32] {
        return v
    }
}
"""


def test_root_selection() -> None:
    program = check_source(TWO_ROOTS)
    with pytest.raises(LinnetError, match=r"several blocks with entries \(`A`, `B`\)"):
        build_plan(program)
    plan = build_plan(program, "B")
    assert plan["root"]["name"] == "B"
    assert [e["path"] for e in plan["manifest"]] == ["v"]
    with pytest.raises(LinnetError, match="no block `C`"):
        build_plan(program, "C")
    functions_only = plan_of(VALID / "spec_algebra.linnet")
    assert functions_only["root"] is None and functions_only["manifest"] == []


def test_a_program_with_errors_is_not_planned() -> None:
    program = check_source("module m\n\npub fn f(x: f32) -> f32 {\n    return y\n}\n")
    with pytest.raises(LinnetError) as info:
        build_plan(program)
    assert info.value.diagnostics and info.value.diagnostics[0].code == "E1201"


# -- dimension encodings --------------------------------------------------------------------


def eval_dim(d: Any, syms: dict[int, int]) -> int:
    """An evaluator for the JSON `dim` encoding of 19, independent of `check.dims`."""
    if isinstance(d, int):
        return d
    if "sym" in d:
        return syms[d["sym"]]
    if "packsize" in d:
        return syms[d["packsize"]]
    args = [eval_dim(a, syms) for a in d["args"]]
    if d["op"] == "add":
        return sum(args)
    if d["op"] == "mul":
        out = 1
        for a in args:
            out *= a
        return out
    a, b = args
    if d["op"] == "floordiv":
        return a // b
    if d["op"] == "mod":
        return a % b
    return min(a, b) if d["op"] == "min" else max(a, b)


H, G, P = Symbol("H"), Symbol("G"), Symbol("P", is_pack=True)


def dims() -> st.SearchStrategy[Dim]:
    leaves = st.one_of(
        st.integers(-5, 9).map(Dim.const),
        st.sampled_from([Dim.symbol(H), Dim.symbol(G), Dim.pack_size(P)]),
    )

    def extend(inner: st.SearchStrategy[Dim]) -> st.SearchStrategy[Dim]:
        positive = st.integers(1, 7).map(Dim.const)
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] - p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] * p[1]),
            st.tuples(inner, positive).map(lambda p: p[0].floordiv(p[1])),
            st.tuples(inner, positive).map(lambda p: p[0].mod(p[1])),
            st.tuples(inner, inner).map(lambda p: p[0].minimum(p[1])),
            st.tuples(inner, inner).map(lambda p: p[0].maximum(p[1])),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(d=dims(), h=st.integers(0, 50), g=st.integers(1, 50), p=st.integers(0, 50))
def test_dim_encoding_evaluates_like_the_dim(d: Dim, h: int, g: int, p: int) -> None:
    numbering = Numbering()
    encoded = ValueEncoder(numbering).dim(d)
    json.dumps(encoded)
    syms = {numbering.syms[s]: v for s, v in ((H, h), (G, g), (P, p)) if s in numbering.syms}
    assert eval_dim(encoded, syms) == d.evaluate({H: h, G: g}, {P: (p,)})


def test_dim_encoding_shapes() -> None:
    enc = ValueEncoder(Numbering())
    h, g = Dim.symbol(H), Dim.symbol(G)
    assert enc.dim(Dim.const(7)) == 7
    assert enc.dim(h) == {"sym": 0, "name": "H"}
    assert enc.dim(h.floordiv(g)) == {
        "op": "floordiv", "args": [{"sym": 0, "name": "H"}, {"sym": 1, "name": "G"}],
    }  # fmt: skip
    assert enc.dim(2 * h - 1) == {"op": "add", "args": [{"op": "mul", "args": [2, {"sym": 0,
                                  "name": "H"}]}, -1]}  # fmt: skip
    assert enc.unit(P) == {"pack": 2, "name": "P"}
    assert enc.dim(Dim.pack_size(P)) == {"packsize": 2, "name": "P"}


# -- the command line -----------------------------------------------------------------------


def test_cli_plan(capsys: pytest.CaptureFixture[str]) -> None:
    from linnet.cli import main

    assert main(["plan", str(VALID / "spec_tiny.linnet")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out == plan_json(plan_of(VALID / "spec_tiny.linnet"))
    assert main(["plan", "--numerics", "exact", "--no-optimize", "--root", "Mlp",
                 str(VALID / "spec_tiny.linnet")]) == 0  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert document["numerics"] == "exact" and document["optimized"] is False
    assert main(["plan", "--numerics", "fast", str(VALID / "spec_tiny.linnet")]) == 2
    assert "`--numerics` takes `exact` or `equivalent`" in capsys.readouterr().err
    assert main(["plan", "--root", "Nope", str(VALID / "spec_tiny.linnet")]) == 1
    assert capsys.readouterr().err.startswith("linnet: module `examples.tiny` has no block `Nope`")


def test_cli_plan_of_a_file_with_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from linnet.cli import main

    bad = tmp_path / "bad.linnet"
    bad.write_text("module m\n\npub fn f(x: f32) -> f32 {\n    return y\n}\n", encoding="utf-8")
    assert main(["--no-color", "plan", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "error E1201" in err


def test_cli_plan_needs_no_numpy(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from linnet.cli import main\n"
        f"status = main(['plan', {str(VALID / 'spec_tiny.linnet')!r}])\n"
        "heavy = sorted(m for m in ('torch', 'numpy') if m in sys.modules)\n"
        "print(status, heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stderr.strip() == "0 []"
    assert json.loads(result.stdout)["module"] == "examples.tiny"
