"""A model past protobuf's 2 GB limit loads and runs through `load_model` (slow).

One param of 2.2 GB (f32) is written as SafeTensors; `load_model` binds it
memory-mapped, makes it an `OrtValue` over the same memory and binds it to
the session by I/O binding. The exported graph holds no weight, so it stays
far below the limit whatever the model's size; an embedded export of the
same model could not be serialised at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linnet.ir.core import TensorType
from linnet.onnx import load_model
from linnet.weights import save_safetensors

SOURCE = """module big

pub block Table<Rows: Dim, H: Dim> {
    param table: Tensor[Rows, H; f32]
    param scale: Tensor[H; f32]

    pub entry lookup<N: Dim>(ids: Tensor[N; i32]) -> Tensor[N, H; f32] {
        let rows[n, h] = table[ids[n], h] * scale[h]
        return rows
    }
}
"""
ROWS, H = 540_000, 1024  # 2.2 GB of f32


@pytest.mark.slow
def test_a_model_past_2_gb_loads_and_runs(tmp_path: Path) -> None:
    table = np.empty((ROWS, H), np.float32)
    table[:] = np.arange(ROWS, dtype=np.float32)[:, None]
    table[:, 1] = -np.arange(ROWS, dtype=np.float32)
    scale = np.full(H, 0.5, np.float32)
    path = tmp_path / "big.safetensors"
    save_safetensors({"table": table, "scale": scale}, path)
    assert table.nbytes > 2**31
    del table

    model = load_model(SOURCE, generics={"Rows": ROWS, "H": H}, weights=path)
    ids = np.array([0, 7, ROWS - 1, 123_456], np.int32)
    rows = model.run_entry("lookup", [ids])
    assert rows.shape == (4, H)
    np.testing.assert_array_equal(rows[:, 0], ids.astype(np.float32) * 0.5)
    np.testing.assert_array_equal(rows[:, 1], -ids.astype(np.float32) * 0.5)
    (session,) = model.sessions
    assert session.proto.ByteSize() < 2**20  # the graph carries no weight
    proto, _ = model.export("lookup", [TensorType((4,), "i32")])
    assert proto.ByteSize() < 2**20
