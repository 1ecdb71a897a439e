"""`jnp.sort`, `argsort`, `lax.top_k` and `.at[...]` updates through the JAX importer.

Each function is captured with `jax.export`, imported (sorts as `TopK` of the
whole axis, scatters as `ScatterND`, both written as comprehensions) and the
source equals JAX (`jax_import_support.check`). Forms the importer does not
read are refused by name, with nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_import_support import check, normal  # noqa: E402

from linnet.jax import export_linnet  # noqa: E402
from linnet.sourcegen.refusals import ImportRefusedError  # noqa: E402

CASES = {
    "sort": lambda p, x: jnp.sort(x * p["w"]),
    "argsort": lambda p, x: jnp.argsort(x * p["w"]),
    "descending_axis0": lambda p, x: jnp.sort(x * p["w"], axis=0, descending=True),
    "top_k": lambda p, x: lax.top_k(x * p["w"], 2),
    "set_row": lambda p, x: x.at[1].set(p["w"]),
    "add_rows": lambda p, x: x.at[jnp.array([0, 2, 0])].add(p["w"]),
    "max_rows": lambda p, x: x.at[jnp.array([2, 1])].max(p["w"]),
    "mul_rows": lambda p, x: x.at[jnp.array([1])].multiply(p["w"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sort_and_scatter_patterns(name: str, tmp_path: Path) -> None:
    x = normal(3, 5)
    x[0, 1] = x[0, 3]  # a tie: stable order kept
    result = check(CASES[name], {"w": normal(5)}, (x,), tmp_path)
    assert "stablehlo" not in result.source


def test_other_sorts_and_scatters_are_refused_by_name(tmp_path: Path) -> None:
    def by_keys(p: Any, x: Any) -> Any:
        return lax.sort((x, x * p["w"]), num_keys=1)[1]  # one array sorted by another's keys

    def column(p: Any, x: Any) -> Any:
        return x.at[:, 3].set(p["w"][:3])

    folder = tmp_path / "out"
    for fn, op, why in (
        (by_keys, "stablehlo.sort", "by another's keys"),
        (column, "stablehlo.scatter", "only scatters into the leading axes"),
    ):
        with pytest.raises(ImportRefusedError) as err:
            export_linnet(fn, {"w": normal(5)}, (normal(3, 5),), output=folder / "m.linnet")
        assert op in str(err.value) and why in str(err.value), str(err.value)
    assert not folder.exists()
