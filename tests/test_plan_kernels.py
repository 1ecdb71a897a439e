"""Kernels in the plan document (language-extensions 0.5): kernel records and op references."""

from __future__ import annotations

from pathlib import Path

from linnet.plan.document import plan_file

TILES = Path(__file__).parents[1] / "examples" / "kernels" / "tiles.linnet"


def _ops(region: dict[str, object]) -> list[str]:
    kinds: list[str] = []
    for op in region["ops"]:  # type: ignore[attr-defined]
        kinds.append(op["kind"])
        for inner in op["regions"]:
            kinds.extend(_ops(inner))
    return kinds


def test_kernel_records_and_references() -> None:
    plan = plan_file(TILES)
    by_name = {f["name"]: f for f in plan["functions"]}  # type: ignore[union-attr]
    matmul = by_name["kernels.tiles::matmul_tiles"]
    assert matmul["kind"] == "kernel" and (matmul["warps"], matmul["stages"]) == (4, 2)
    assert [r["name"] for r in matmul["results"]] == ["c"] and len(matmul["grid"]) == 2
    assert [a["name"] for a in matmul["body"]["args"]] == ["a", "b", "c"]
    kinds = _ops(matmul["body"])
    assert kinds.count("kernel.program_id") == 2 and kinds.count("kernel.load") == 2
    assert "while" in kinds and kinds.count("kernel.store") == 1
    count = by_name["kernels.tiles::count_ids"]
    (store,) = [op for op in count["body"]["ops"] if op["kind"] == "kernel.store"]
    assert store["attrs"] == {"mode": "add", "components": 1, "mask": True}
    # ops name their kernel with its generics in the op's terms; other functions have null
    ref = by_name["kernels.tiles::tally"]["kernel"]
    assert ref["name"] == "kernels.tiles::count_ids"
    assert [g if isinstance(g, int) else g["name"] for g in ref["generics"]] == ["N", "K", 128]
    assert by_name["kernels.tiles::histogram"]["kernel"] is None
