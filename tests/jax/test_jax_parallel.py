"""Tensor parallelism on linnet.jax (language-extensions 7): a `Shards` model split over a
4-device mesh axis under `jax.shard_map` equals the one-shard model.

XLA's host platform has 4 devices only when told before jax starts, so the sharded runs
happen in a fresh process (`PROBE`), which prints its measurements as JSON:

- section 7.4's `ShardedMlp` (f32): `Shards` is bound to 4, device `p` holds the `p`-th
  slice of `up` (rows) and of `down` (columns), and the output equals the whole model's;
- Megatron's MLP with `shared`, `all_reduce` and a gathered vocabulary-parallel head
  (f64): the output and `jax.grad` of every weight and of the input equal the whole
  model's (so `shared`'s summed gradient and `all_gather`'s sliced one are right);
- a state member split by `Shards` is placed on the mesh and carried between calls;
- a `Shards` generic that contradicts the mesh, and `linnet.jax.load`, are refused.

In this process (one device): `Shards > 1` without a mesh runs the bodies and warns
(decision 21), `Shards = 1` does not; ONNX Runtime's `load_model` warns the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

import linnet.jax as lj
from linnet.errors import LinnetError

ROOT = Path(__file__).resolve().parents[2]

SECTION_7_4 = """module examples.sharded

use std.nn.parallel::{all_reduce}

pub block ShardedMlp<H: Dim, Inner: Dim, Shards: Dim = 1, T: Float = f32>
where
    Shards > 0,
    Inner % Shards == 0
{
    param up: Tensor[Inner / Shards, H; T]
    param down: Tensor[H, Inner / Shards; T]

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, H; T] {
        let hidden[b, k] = sum[i] x[b, i] * up[k, i]
        let active = max(hidden, 0.0)
        let partial[b, o] = sum[k] active[b, k] * down[o, k]
        return all_reduce(partial)
    }
}
"""

MEGATRON = """module sharded

use std.nn.parallel::{all_gather, all_reduce, shared}

pub block ShardedMlp<H: Dim, Inner: Dim, Vocab: Dim, Shards: Dim = 1, T: Float = f64>
where
    Shards > 0,
    Inner % Shards == 0,
    Vocab % Shards == 0
{
    param up: Tensor[Inner / Shards, H; T]
    param down: Tensor[H, Inner / Shards; T]
    param head: Tensor[Vocab / Shards, H; T]
    param gain: Tensor[H; T]

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, Vocab; T] {
        let xs = shared(x * gain)
        let hidden[b, k] = sum[i] xs[b, i] * up[k, i]
        let active = max(hidden, 0.0)
        let partial[b, o] = sum[k] active[b, k] * down[o, k]
        let y = shared(all_reduce(partial))
        let logits[b, v] = sum[i] y[b, i] * head[v, i]
        return all_gather<B, Vocab / Shards, Shards, T>(logits)
    }
}
"""

COUNTING = """module counting

use std.nn.parallel::{all_gather}

// A state member split like the weight it follows: each shard sums its own hidden units.
pub block Counting<H: Dim, Inner: Dim, Shards: Dim = 1, T: Float = f64>
where
    Shards > 0,
    Inner % Shards == 0
{
    param up: Tensor[Inner / Shards, H; T]
    state seen: Tensor[Inner / Shards; T]

    pub entry forward<B: Dim>(x: Tensor[B, H; T]) -> Tensor[B, Inner; T] {
        let hidden[b, k] = sum[i] x[b, i] * up[k, i]
        let total[k] = sum[b] hidden[b, k]
        seen = seen + total
        let scaled[b, k] = hidden[b, k] * seen[k]
        return all_gather<B, Inner / Shards, Shards, T>(scaled)
    }
}
"""

PROBE = """
import json, sys
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec
import linnet.jax as lj
from linnet.errors import LinnetError

jax.config.update("jax_enable_x64", True)
folder = sys.argv[1]
read = lambda name: open(f"{folder}/{name}.linnet").read()
assert len(jax.devices()) == 4
mesh = Mesh(np.array(jax.devices()), ("tp",))
rng = np.random.default_rng(0)
out = {}
gap = lambda a, b: float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())

# section 7.4, f32
weights = {"up": rng.standard_normal((8, 4)).astype(np.float32),
           "down": rng.standard_normal((4, 8)).astype(np.float32)}
x = rng.standard_normal((3, 4)).astype(np.float32)
sizes = {"H": 4, "Inner": 8}
whole = lj.load_source(read("section_7_4"), generics=sizes, weights=weights)
split = lj.load_source(read("section_7_4"), generics=sizes, weights=weights, tensor_parallel=mesh)
out["shards"] = split.model.generics["Shards"]
out["mlp_gap"] = gap(split(x), whole(x))
up, down = split.parameters["up"], split.parameters["down"]
out["up_spec"] = list(up.sharding.spec)
out["down_spec"] = list(down.sharding.spec)
out["slices"] = all(
    np.array_equal(np.asarray(s.data), weights["up"][2 * s.device.id : 2 * s.device.id + 2])
    for s in up.addressable_shards
) and all(
    np.array_equal(np.asarray(s.data), weights["down"][:, 2 * s.device.id : 2 * s.device.id + 2])
    for s in down.addressable_shards
)
out["psum_in_source"] = "TP.all_reduce(" in split.generated_source()

# Megatron's MLP, f64: outputs and gradients
weights = {"up": rng.standard_normal((8, 4)), "down": rng.standard_normal((4, 8)),
           "head": rng.standard_normal((8, 4)), "gain": rng.standard_normal(4)}
x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 8))
sizes = {"H": 4, "Inner": 8, "Vocab": 8}
whole = lj.load_source(read("megatron"), generics=sizes, weights=weights)
split = lj.load_source(read("megatron"), generics=sizes, weights=weights, tensor_parallel=mesh)
out["megatron_gap"] = gap(split(x), whole(x))
grad = lambda f: jax.grad(lambda p, x: (f.apply(p, x) * w).sum(), argnums=(0, 1))
(gw0, gx0), (gw1, gx1) = grad(whole)(whole.parameters, x), grad(split)(split.parameters, x)
out["grad_gaps"] = {p: gap(gw1[p], gw0[p]) for p in gw0} | {"x": gap(gx1, gx0)}
out["grad_norm"] = float(sum(np.abs(np.asarray(g)).sum() for g in gw0.values()))

# a split state member carried between calls
weights = {"up": rng.standard_normal((8, 4))}
sizes = {"H": 4, "Inner": 8}
whole = lj.load_source(read("counting"), generics=sizes, weights=weights)
split = lj.load_source(read("counting"), generics=sizes, weights=weights, tensor_parallel=mesh)
gaps, state0, state1 = [], None, None
for step in range(2):
    x = rng.standard_normal((3, 4))
    y0, state0 = whole(x, state=state0)
    y1, state1 = split(x, state=state1)
    gaps += [gap(y1, y0), gap(state1["seen"], state0["seen"])]
out["state_gap"] = max(gaps)
out["state_spec"] = list(state1["seen"].sharding.spec)

# load_model: every entry over the mesh, the split state kept between calls
plain = lj.load_model(read("counting"), generics=sizes, weights=weights)
split = lj.load_model(read("counting"), generics=sizes, weights=weights, tensor_parallel=mesh)
gaps = []
for step in range(3):
    x = rng.standard_normal((2, 4))
    gaps.append(gap(split.run_entry("forward", [x]), plain.run_entry("forward", [x])))
    gaps.append(gap(split.state["seen"], plain.state["seen"]))
out["model_gap"] = max(gaps)
out["model_state_spec"] = list(split.state["seen"].sharding.spec)
out["model_seen"] = float(np.abs(np.asarray(plain.state["seen"])).sum())

# refusals
try:
    lj.load_source(read("counting"), generics={**sizes, "Shards": 2}, weights=weights,
                   tensor_parallel=mesh)
except LinnetError as e:
    out["mismatch"] = e.message
try:
    lj.load(read("counting"), generics=sizes, weights=weights, tensor_parallel=mesh)
except LinnetError as e:
    out["stablehlo"] = e.message
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("tensor_parallel")
    for name, text in (
        ("section_7_4", SECTION_7_4),
        ("megatron", MEGATRON),
        ("counting", COUNTING),
    ):
        (folder / f"{name}.linnet").write_text(text)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "PYTHONPATH": str(ROOT / "src"),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.split("RESULT")[-1])
    return result


def test_section_7_4_on_four_devices(probe: dict[str, object]) -> None:
    assert probe["shards"] == 4
    assert probe["up_spec"] == ["tp"]
    assert probe["down_spec"] == [None, "tp"]
    assert probe["slices"] is True
    assert probe["psum_in_source"] is True
    assert float(probe["mlp_gap"]) <= 1e-5  # type: ignore[arg-type]


def test_outputs_and_gradients_equal_the_one_shard_model(probe: dict[str, object]) -> None:
    assert float(probe["megatron_gap"]) <= 1e-12  # type: ignore[arg-type]
    gaps = probe["grad_gaps"]
    assert isinstance(gaps, dict) and sorted(gaps) == ["down", "gain", "head", "up", "x"]
    assert max(gaps.values()) <= 1e-12, gaps
    assert float(probe["grad_norm"]) > 1.0  # type: ignore[arg-type]


def test_split_state_is_carried_on_the_mesh(probe: dict[str, object]) -> None:
    assert float(probe["state_gap"]) <= 1e-12  # type: ignore[arg-type]
    assert probe["state_spec"] == ["tp"]


def test_load_model_keeps_split_state_between_calls(probe: dict[str, object]) -> None:
    assert float(probe["model_gap"]) <= 1e-12  # type: ignore[arg-type]
    assert probe["model_state_spec"] == ["tp"]
    assert float(probe["model_seen"]) > 0  # type: ignore[arg-type]


def test_refusals(probe: dict[str, object]) -> None:
    assert "`Shards` is 2 but mesh axis `tp` has 4 devices" in str(probe["mismatch"])
    assert "load_source" in str(probe["stablehlo"])


def test_several_shards_in_one_process_warn_and_run_the_bodies() -> None:
    rng = np.random.default_rng(1)
    weights = {"up": rng.standard_normal((2, 4)), "down": rng.standard_normal((4, 2))}
    sizes = {"H": 4, "Inner": 4, "T": "f64"}
    with pytest.warns(UserWarning, match="Shards = 2"):
        f = lj.load_source(SECTION_7_4, generics={**sizes, "Shards": 2}, weights=weights)
    x = rng.standard_normal((3, 4))
    want = np.maximum(x @ weights["up"].T, 0) @ weights["down"].T  # all_reduce's body: x
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one shard: no warning
        whole = {"up": rng.standard_normal((4, 4)), "down": rng.standard_normal((4, 4))}
        lj.load_source(SECTION_7_4, generics=sizes, weights=whole)


def test_tensor_parallel_takes_a_one_axis_mesh() -> None:
    import jax
    from jax.sharding import Mesh

    two_axes = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "tp"))
    weights = {"up": np.ones((4, 4), np.float32), "down": np.ones((4, 4), np.float32)}
    with pytest.raises(LinnetError, match="one-axis"):
        lj.load_source(
            SECTION_7_4, generics={"H": 4, "Inner": 4}, weights=weights, tensor_parallel=two_axes
        )


def test_tensor_parallel_needs_a_shards_block() -> None:
    module_entry = (
        "module plain\n\npub entry f(x: Tensor[2; f32]) -> Tensor[2; f32] {\n    return x\n}\n"
    )
    with pytest.raises(LinnetError, match="Shards"):
        lj.load_source(module_entry, tensor_parallel=object())


def test_onnx_runtime_warns_too() -> None:
    from linnet.onnx import load_model

    rng = np.random.default_rng(2)
    weights = {"up": rng.standard_normal((2, 4)), "down": rng.standard_normal((4, 2))}
    generics = {"H": 4, "Inner": 4, "T": "f64", "Shards": 2}
    with pytest.warns(UserWarning, match="Shards = 2"):
        model = load_model(SECTION_7_4, generics=generics, weights=weights)
    x = rng.standard_normal((3, 4))
    want = np.maximum(x @ weights["up"].T, 0) @ weights["down"].T
    np.testing.assert_allclose(model.run_entry("forward", [x]), want, rtol=1e-12)


def test_mesh_and_tensor_parallel_are_exclusive() -> None:
    with pytest.raises(LinnetError, match="not both"):
        lj.load_model(
            SECTION_7_4, generics={"H": 4, "Inner": 4}, mesh=object(), tensor_parallel=object()
        )
