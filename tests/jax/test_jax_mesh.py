"""`linnet.jax.load_model(mesh=...)`: weights and caches sharded over 4 CPU devices by XLA.

XLA's host platform pretends to have 4 devices only when told before jax
starts, so the check runs in a fresh process: the Llama example on a 4-device
mesh (weights split by rows, KV caches by key/value heads) gives the logits
of the unsharded model for a prefill and decode steps, its caches stay
sharded and donated, and the StableHLO is partitioned 4 ways.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import numpy as np, jax
from pathlib import Path
from jax.sharding import Mesh
import linnet.jax as lj
from linnet.pipeline import load_model

assert len(jax.devices()) == 4
source = Path(SOURCE)
sizes = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 4, "Inner": 48, "Layers": 2,
         "Batch": 2, "MaxSeq": 16, "T": "f32"}
rng = np.random.default_rng(0)
tensors = load_model(source, generics=sizes).tensors
weights = {p: rng.normal(0, 0.3, t.type.shape).astype(np.float32)
           for p, t in tensors.items() if t.kind == "param" and not t.optional}
plain = lj.load_model(source, generics=sizes, weights=weights)
mesh = Mesh(np.array(jax.devices()), ("model",))
sharded = lj.load_model(source, generics=sizes, weights=weights, mesh=mesh)
tokens = rng.integers(0, 61, (2, 5)).astype(np.int32)
gaps = [np.abs(np.asarray(plain.run_entry("prefill", [tokens, 0]))
               - np.asarray(sharded.run_entry("prefill", [tokens, 0]))).max()]
for position in range(5, 8):
    cache = sharded.state["model.layers.0.self_attn.k_cache"]
    inputs = [tokens[:, position - 5], position]
    gaps.append(np.abs(np.asarray(plain.run_entry("decode", inputs))
                       - np.asarray(sharded.run_entry("decode", inputs))).max())
    assert cache.is_deleted()
cache = sharded.state["model.layers.0.self_attn.k_cache"]
weight = sharded.parameters["model.layers.0.mlp.up_proj.weight"]
assert not cache.sharding.is_fully_replicated and len(cache.sharding.device_set) == 4
assert cache.sharding.spec == jax.sharding.PartitionSpec(None, "model")
assert weight.sharding.spec == jax.sharding.PartitionSpec("model")
assert "mhlo.num_partitions = 4" in sharded.stablehlo_text("decode")
print("gap", max(gaps))
"""


def test_mesh_shards_weights_and_caches() -> None:
    source = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "PYTHONPATH": str(ROOT / "src"),
    }
    done = subprocess.run(
        [sys.executable, "-c", f"SOURCE = {str(source)!r}\n{PROBE}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    gap = float(done.stdout.split("gap")[-1])
    assert gap <= 1e-5, gap
