"""Data parallel and FSDP2 training over two gloo ranks equal one process with the whole batch.

Each rank loads the Llama example (seeded weights), takes every second packed
batch (rank 0 the even ones, rank 1 the odd ones) and trains with
`linnet.train.train`; the parent trains the same model in one process with
`accumulate=2` over all the batches, so each of its steps sees exactly the two
batches the ranks see together. The losses agree to 1e-5 relative and the
parameters to 1e-5. Under FSDP2 (`fully_shard`) the ranks hold halves of every
parameter and gather them for each entry call; the checkpoint of such a run
is written per rank and resumes exactly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from train_support import examples

import linnet.torch as lt
from linnet.torch.module import LinnetModule
from linnet.train import History, pack, train
from linnet.weights import read_safetensors, save_safetensors

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
CONFIG = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2}
GENERICS = {**CONFIG, "Batch": 1, "MaxSeq": 16, "T": "f32"}
STEPS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_weights(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "llama_weights", LLAMA.parents[1] / "make_weights.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    save_safetensors(module.make_weights(GENERICS, seed=3), folder / "weights.safetensors")


def batches() -> list[Any]:
    return list(pack(examples(int(CONFIG["Vocab"]), 60, seed=31), 32))


def run(folder: Path, model: LinnetModule, data: list[Any], **options: Any) -> History:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return train(model, data, optimizer=optimizer, steps=STEPS, **options)


def _rank(rank: int, world: int, port: int, folder: str, mode: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = lt.load(
            LLAMA, generics=GENERICS, weights=f"{folder}/weights.safetensors", trainable=True
        )
        if mode.startswith("fsdp"):
            from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

            fully_shard(model)
            if mode == "fsdp-resume":  # registered here; in "fsdp" train registers it
                register_fsdp_forward_method(model, "run_entry")
        mine = batches()[rank::world]
        options: dict[str, Any] = {}
        if mode == "fsdp-resume":  # two steps, then a fresh model resumes to STEPS
            options = {"checkpoint": f"{folder}/checkpoint", "checkpoint_every": 2}
            first = lt.load(
                LLAMA, generics=GENERICS, weights=f"{folder}/weights.safetensors", trainable=True
            )
            from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

            fully_shard(first)
            register_fsdp_forward_method(first, "run_entry")
            optimizer = torch.optim.AdamW(first.parameters(), lr=3e-3, weight_decay=0.01)
            train(first, mine, optimizer=optimizer, steps=2, **options)
        history = run(Path(folder), model, mine, **options)
        whole = {}
        for name, p in model.named_parameters():
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            whole[name] = full.detach().numpy()
        if rank == 0:
            save_safetensors(whole, f"{folder}/trained.safetensors")
            (Path(folder) / "losses.json").write_text(json.dumps(history.losses))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["data-parallel", "fsdp", "fsdp-resume"])
def test_two_ranks_equal_one_process_with_the_whole_batch(tmp_path: Path, mode: str) -> None:
    write_weights(tmp_path)
    mp.spawn(_rank, args=(2, _free_port(), str(tmp_path), mode), nprocs=2, join=True)
    model = lt.load(
        LLAMA, generics=GENERICS, weights=tmp_path / "weights.safetensors", trainable=True
    )
    history = run(tmp_path, model, batches(), accumulate=2)
    losses = json.loads((tmp_path / "losses.json").read_text())
    assert losses == pytest.approx(history.losses, rel=1e-5)
    trained = read_safetensors(tmp_path / "trained.safetensors")
    for name, value in model.named_parameters():
        torch.testing.assert_close(
            torch.from_numpy(trained[name].copy()), value.detach(), rtol=1e-5, atol=1e-5, msg=name
        )
    if mode == "fsdp-resume":
        step = tmp_path / "checkpoint" / "step-00000004"
        assert {p.name for p in step.iterdir()} >= {
            "model.rank0.safetensors", "model.rank1.safetensors", "optimizer.rank1.json",
            "random.rank1.safetensors", "progress.json",
        }  # fmt: skip
