"""Tensor parallelism (language-extensions 7): two gloo ranks equal the one-shard model.

Each rank loads the same one-shard checkpoint with `tensor_parallel=True`, runs forward
and backward, and sends back its output and its gradients; the parent compares them with
the whole model in one process: the outputs equal, and each rank's gradient of a split
weight is that weight's slice of the whole gradient (whole weights: the whole gradient).
"""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import linnet.torch as lt
from linnet.errors import LinnetError
from linnet.weights import save_safetensors

SOURCE = """module sharded

use std.nn.loss::{cross_entropy}
use std.nn.parallel::{all_gather, all_reduce, shared}

// Column-parallel up projection, row-parallel down projection (Megatron's MLP), and a
// vocabulary-parallel head whose logits are gathered.
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
SIZES = {"H": 4, "Inner": 6, "Vocab": 8}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, port: int, folder: str, compile: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = lt.load(
            SOURCE,
            generics=SIZES,
            weights=f"{folder}/weights.safetensors",
            trainable=True,
            tensor_parallel=True,
            compile=compile,
        )
        x = torch.tensor(np.load(f"{folder}/x.npy"), requires_grad=True)
        y = model(x)
        (y * torch.tensor(np.load(f"{folder}/w.npy"))).sum().backward()
        grads = {p: t.grad.numpy() for p, t in model.named_parameters()}
        np.savez(f"{folder}/rank{rank}.npz", y=y.detach().numpy(), x=x.grad.numpy(), **grads)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_two_ranks_equal_one_process(tmp_path: Path, compile: bool) -> None:
    rng = np.random.default_rng(0)
    weights = {
        "up": rng.standard_normal((6, 4)),
        "down": rng.standard_normal((4, 6)),
        "head": rng.standard_normal((8, 4)),
        "gain": rng.standard_normal(4),
    }
    save_safetensors(weights, tmp_path / "weights.safetensors")
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 8))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)

    whole = lt.load(SOURCE, generics=SIZES, weights=weights, trainable=True)
    xt = torch.tensor(x, requires_grad=True)
    y = whole(xt)
    (y * torch.tensor(w)).sum().backward()
    grads = {p: t.grad.numpy() for p, t in whole.named_parameters()}

    mp.spawn(_rank, args=(2, _free_port(), str(tmp_path), compile), nprocs=2, join=True)
    for rank in range(2):
        got = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_allclose(got["y"], y.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(got["x"], xt.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["up"], grads["up"][3 * rank : 3 * rank + 3], rtol=1e-12)
        np.testing.assert_allclose(got["down"], grads["down"][:, 3 * rank : 3 * rank + 3])
        np.testing.assert_allclose(got["head"], grads["head"][4 * rank : 4 * rank + 4])
        np.testing.assert_allclose(got["gain"], grads["gain"], rtol=1e-12)


def test_one_process_runs_the_bodies_and_warns_for_several_shards() -> None:
    rng = np.random.default_rng(1)
    weights = {
        "up": rng.standard_normal((3, 4)),
        "down": rng.standard_normal((4, 3)),
        "head": rng.standard_normal((4, 4)),
        "gain": rng.standard_normal(4),
    }
    with pytest.warns(UserWarning, match="Shards = 2"):
        model = lt.load(SOURCE, generics={**SIZES, "Shards": 2}, weights=weights)
    x = rng.standard_normal((2, 4))
    y = model(torch.tensor(x)).numpy()
    hidden = np.maximum((x * weights["gain"]) @ weights["up"].T, 0) @ weights["down"].T
    logits = hidden @ weights["head"].T
    np.testing.assert_allclose(y, np.concatenate([logits, logits], axis=-1))  # the body repeats
    whole = {
        "up": rng.standard_normal((6, 4)),
        "down": rng.standard_normal((4, 6)),
        "head": rng.standard_normal((8, 4)),
        "gain": weights["gain"],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one shard: no warning
        lt.load(SOURCE, generics=SIZES, weights=whole)


def test_tensor_parallel_needs_a_process_group() -> None:
    with pytest.raises(LinnetError, match=r"torch\.distributed"):
        lt.load(SOURCE, generics=SIZES, weights=None, trainable=True, tensor_parallel=True)
