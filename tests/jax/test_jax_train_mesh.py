"""`linnet.jax.train.train(mesh=..., remat=True)` on 4 host CPU devices equals one device.

XLA's host platform pretends to have 4 devices only when told before jax
starts, so the check runs in a fresh process: the one-layer Llama trained 3
AdamW steps with `accumulate=4` over 10 batches (the last step has 2, padded
with empty batches) on one device, then FSDP over a 4-device mesh with
rematerialisation, gives the same losses and parameters; the trained
parameters come back split 4 ways, each device holding a quarter of their
bytes (printed: `pytest -s`). Two compiles of the step: a slow check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import numpy as np, jax, optax
from jax.sharding import Mesh
from jax_train_support import small_batches, small_model
from linnet.jax.train import train
from linnet.jax.train.params import device_bytes

assert len(jax.devices()) == 4
model = small_model()
batches = small_batches(48, seed=5)[:10]
options = dict(optimizer=optax.adamw(1e-2, weight_decay=0.01), accumulate=4)
one, expected = train(model, batches, **options)
mesh = Mesh(np.array(jax.devices()), ("data",))
four, history = train(model, batches, mesh=mesh, remat=True, **options)
assert len(history) == len(expected) == 3
gap = max(abs(a - b) / abs(b) for a, b in zip(history.losses, expected.losses))
assert [s.learned for s in history.steps] == [s.learned for s in expected.steps]
for path, value in one.items():
    np.testing.assert_allclose(np.asarray(four[path]), np.asarray(value), rtol=1e-5, atol=1e-6)
weight = four["model.layers.0.mlp.up_proj.weight"]
assert weight.sharding.spec == jax.sharding.PartitionSpec("data")
assert not weight.sharding.is_fully_replicated
total = sum(int(np.asarray(v).nbytes) for v in four.values())
local = device_bytes(four, jax.devices()[0])
print("bytes", total, local)
print("gap", gap)
"""


@pytest.mark.slow
def test_fsdp_on_four_devices_equals_one_device() -> None:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "jax")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    total, local = (int(n) for n in done.stdout.split("bytes")[-1].split()[:2])
    print(f"parameters: {total} bytes, {local} bytes on each device")
    assert local == total // 4
    gap = float(done.stdout.split("gap")[-1])
    assert gap <= 1e-5, gap
