"""`train`: supervised fine-tuning on JAX with optax, one jitted step per optimizer step.

The same step as `linnet.train.train` (PyTorch), on the same `Batch`es
(`linnet.train.pack`) and the model's same `loss_packed` entry: a step reads
`accumulate` batches and its loss is

    sum over those batches of loss_packed(batch) / learned

with `learned` the sum of their weights, so every learned token of the step
counts once however the tokens fall into batches. Inside one `jax.jit`:

- the micro-batches are stacked `[accumulate, P]` and a `lax.scan` runs
  `jax.value_and_grad` of each and sums the gradients, so one micro-batch's
  activations live at a time;
- the gradients are clipped to a global norm of `clip` as
  `torch.nn.utils.clip_grad_norm_` does (scaled by `min(clip / (norm + 1e-6),
  1)`; `None` or 0: not clipped), then `optimizer` (any optax
  `GradientTransformation`) updates the trained arrays.

Parameters (`linnet.jax.train.params`): `trainable` picks them by path globs,
they are kept in the `master` dtype (f32) and cast to the loaded (compute)
dtype for each forward pass, and a tied pair is one trained array.

`mesh=` (a `jax.sharding.Mesh`) is data parallelism with fully sharded
parameters (FSDP) by XLA's partitioner: the trained and frozen arrays, the
gradients and the optimizer state are split along their largest axis the
mesh's first axis divides, and the micro-batches go `n` at a time, one per
device (`n` the size of that axis): the scan runs over `[accumulate / n, n,
P]`, `jax.vmap` over the `n` batches split across the devices. A group short
of a multiple of `n` is padded with empty batches (weights 0: no loss, no
gradient).

`remat=` chooses what the backward pass recomputes rather than keeps:
`True` (or `"layers"`, or `LayerRemat(policy, prefix)`) wraps each layer of the model in
its own `jax.checkpoint`: the loss entry's source is generated with each
layer's ops as a nested function (`linnet.jax.remat`: lowering unrolls the
layers, the weight paths `model.layers.<n>.` say where each starts), so only
the layers' inputs are kept and one layer's activations are rebuilt at a
time. `"loss"` wraps each micro-batch's whole loss in one `jax.checkpoint` (the
whole forward pass is recomputed); a `jax.checkpoint_policies` policy in
place of `"loss"` (e.g. `dots_with_no_batch_dims_saveable`) does so keeping
what it names. Neither changes the losses or gradients.

Checkpoints (`linnet.jax.train.checkpoint`): with `checkpoint=FOLDER` a run
first restores the latest complete step saved there (trained arrays,
optimizer state, history, batches consumed), skips the batches that step had
consumed (pass the same batch stream from its start), saves every
`checkpoint_every` steps and after the last, and so continues exactly where
the saved run stopped.

Returns every parameter by path in its compute dtype (`f.apply(params, ...)`
runs with them) and the `History` (`linnet.train.History`); a step's `lr` is
the optimizer's `learning_rate` when it is built with
`optax.inject_hyperparams`, NaN otherwise.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from linnet.errors import LinnetError
from linnet.jax.remat import LayerRemat, remat_layers
from linnet.jax.train.checkpoint import load_checkpoint, save_checkpoint
from linnet.jax.train.model import Apply, Trainable, as_trainable
from linnet.jax.train.params import (
    Globs,
    Split,
    constrain_tree,
    gathered,
    select,
    shard_tree,
    split,
)
from linnet.progress import Progress
from linnet.train.checkpoint import latest
from linnet.train.data import Batch
from linnet.train.entries import LOSS
from linnet.train.loop import History, Step, check_options, skip_consumed

Remat = bool | str | LayerRemat | Callable[..., Any]
FIELDS = ("tokens", "positions", "segments", "targets", "weights")
DTYPES = (np.int32, np.int32, np.int32, np.int64, np.float32)


def train(
    model: Any,
    batches: Iterable[Batch],
    *,
    optimizer: Any,
    steps: int | None = None,
    accumulate: int = 1,
    clip: float | None = 1.0,
    trainable: Globs = True,
    master: str | None = "f32",
    parameters: Mapping[str, Any] | None = None,
    mesh: Any = None,
    remat: Remat = False,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> tuple[dict[str, Any], History]:
    """Train `model` on `batches` (module docstring); every parameter and the `History`.

    `model` comes from `linnet.jax.load_source` (any entry of a decoder whose
    block declares `loss_packed`), `linnet.jax.load_model` or `add_lora`;
    `parameters` (path -> array) replaces loaded ones at the start (a
    previous run's result). The run ends after `steps` steps or when the
    batches run out; `on_step` is called with each `Step`.
    """
    check_options(steps, accumulate, clip, checkpoint, checkpoint_every)
    layer_remat(remat)  # an unknown mode is refused before any work
    found, layout, trained = starting_point(model, parameters, trainable, master)
    frozen = dict(layout.frozen)
    opt_state = optimizer.init(trained)
    chunk = 1
    if mesh is not None:
        chunk = int(mesh.shape[mesh.axis_names[0]])
        trained, opt_state, frozen = (shard_tree(t, mesh) for t in (trained, opt_state, frozen))
    history = History()
    done, consumed = 0, 0
    if checkpoint is not None and latest(checkpoint) is not None:
        trained, opt_state, progress = load_checkpoint(checkpoint, trained, opt_state)
        done, consumed = progress.step, progress.batches
        history = History([Step(**s) for s in progress.history])
    step = compiled_step(found.entry(LOSS), layout, optimizer, clip, remat, mesh, chunk)
    stream = skip_consumed(iter(batches), consumed)
    saved = done
    with Progress("training", total=steps) as bar:
        bar.update(done)
        while steps is None or done < steps:
            group = list(itertools.islice(stream, accumulate))
            if not group:
                break
            started = time.perf_counter()
            stacked, learned, tokens = stack(group, accumulate, chunk, mesh)
            with jax.enable_x64(True):
                trained, opt_state, loss, norm = step(
                    trained, opt_state, frozen, stacked, np.float32(learned or 1.0)
                )
            done += 1
            consumed += len(group)
            record = Step(
                done,
                float(loss),
                learned,
                tokens,
                learning_rate(opt_state),
                float(norm) if clip else None,
                time.perf_counter() - started,
            )
            history.steps.append(record)
            bar.update()
            bar.describe(f"loss {record.loss:.4f}, {tokens / max(record.seconds, 1e-9):,.0f} tok/s")
            if checkpoint is not None and checkpoint_every and done % checkpoint_every == 0:
                _save(checkpoint, done, trained, opt_state, consumed, history, mesh)
                saved = done
            if on_step is not None:
                on_step(record)
    if checkpoint is not None and saved != done:
        _save(checkpoint, done, trained, opt_state, consumed, history, mesh)
    return layout.full(trained, frozen), history


def starting_point(
    model: Any, parameters: Mapping[str, Any] | None, trainable: Globs, master: str | None
) -> tuple[Trainable, Split, dict[str, Any]]:
    """The model as training sees it, its trained/frozen `Split` and the trained arrays in
    the master dtype, `parameters` (path -> array) replacing loaded ones."""
    found = as_trainable(model)
    start = dict(found.parameters)
    for path, value in (parameters or {}).items():
        if path not in start:
            raise LinnetError(f"train: parameters= names `{path}`, which the model lacks")
        start[path] = jnp.asarray(value)
    layout, trained = split(found, start, select(found, trainable, start), master)
    return found, layout, trained


def compiled_step(
    loss: Apply,
    layout: Split,
    optimizer: Any,
    clip: float | None,
    remat: Remat,
    mesh: Any,
    chunk: int,
) -> Callable[..., Any]:
    """The jitted `step(trained, opt_state, frozen, stacked, learned) -> (trained, opt_state,
    loss, grad norm)` (module docstring)."""
    layers = layer_remat(remat)
    if layers is not None:
        jitted = compiled_step(loss, layout, optimizer, clip, False, mesh, chunk)

        def traced_per_layer(*args: Any) -> Any:
            # jit traces on a call: the loss entry is prepared inside, with layer remat
            with remat_layers(layers):
                return jitted(*args)

        return traced_per_layer

    def part(trained: Any, frozen: Any, inputs: Sequence[Any], divisor: Any) -> Any:
        params = layout.full(trained, frozen)
        if mesh is None:
            value = loss(params, *inputs)
        else:
            # FSDP: each device gathers the whole weights for its batch's forward and
            # backward pass; the gradients are reduced and split again (constrain_tree)
            params = gathered(params, mesh)
            value = jnp.sum(jax.vmap(lambda *row: loss(params, *row))(*inputs))
        return value / divisor

    if callable(remat):
        part = jax.checkpoint(part, policy=remat)
    elif remat:
        part = jax.checkpoint(part)
    grad = jax.value_and_grad(part)

    def step(trained: Any, opt_state: Any, frozen: Any, stacked: Any, divisor: Any) -> Any:
        def body(carry: Any, inputs: Any) -> Any:
            total, loss_sum = carry
            value, grads = grad(trained, frozen, inputs, divisor)
            return (jax.tree.map(jnp.add, total, grads), loss_sum + value), None

        zeros = jax.tree.map(jnp.zeros_like, trained)
        (grads, value), _ = jax.lax.scan(body, (zeros, jnp.zeros((), jnp.float32)), stacked)
        trained, opt_state, norm = update(optimizer, trained, opt_state, grads, clip, mesh)
        return trained, opt_state, value, norm

    return jax.jit(step, donate_argnums=(0, 1))


def layer_remat(remat: Remat) -> LayerRemat | None:
    """The per-layer remat `remat=` asks for (`True`, `"layers"` or a `LayerRemat`), or
    None (no remat, the whole loss: `"loss"`, or a `jax.checkpoint_policies` policy)."""
    if isinstance(remat, LayerRemat):
        return remat
    if remat is True:
        return LayerRemat()
    if isinstance(remat, str):
        if remat not in ("layers", "loss"):
            raise LinnetError(
                f'train: remat={remat!r} is not an option; use True or "layers" (each layer '
                'under jax.checkpoint), "loss" (the whole loss) or a jax.checkpoint_policies '
                "policy (the whole loss, keeping what it names)"
            )
        return LayerRemat() if remat == "layers" else None
    return None


def update(
    optimizer: Any, trained: Any, opt_state: Any, grads: Any, clip: float | None, mesh: Any = None
) -> tuple[Any, Any, Any]:
    """Clip `grads` as `torch.nn.utils.clip_grad_norm_` does and step `optimizer` (inside a
    jit): the new arrays and optimizer state, and the gradient norm before clipping."""
    import optax  # type: ignore[import-untyped]

    norm = optax.tree.norm(grads)
    if clip:
        scale = jnp.minimum(clip / (norm + 1e-6), 1.0)
        grads = jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)
    if mesh is not None:
        grads = constrain_tree(grads, mesh)
    updates, opt_state = optimizer.update(grads, opt_state, trained)
    trained = optax.apply_updates(trained, updates)
    if mesh is not None:
        trained, opt_state = constrain_tree(trained, mesh), constrain_tree(opt_state, mesh)
    return trained, opt_state, norm


def stack(
    group: Sequence[Batch], accumulate: int, chunk: int, mesh: Any
) -> tuple[tuple[Any, ...], float, int]:
    """The group's inputs stacked `[steps, P]` (or `[steps, chunk, P]` on a mesh), padded to
    `accumulate` batches rounded up to a multiple of `chunk` with empty batches; the
    learned positions and positions of the real batches."""
    arrays = [[np.asarray(getattr(b, f)) for f in FIELDS] for b in group]
    sizes = {a[0].shape for a in arrays}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise LinnetError(
            f"train: the batches of one step must all be 1-D of one length (from "
            f"linnet.train.pack), got shapes {sorted(sizes)}"
        )
    (length,) = next(iter(sizes))
    learned = float(sum(float(a[4].sum()) for a in arrays))
    wanted = -(-max(accumulate, len(group)) // chunk) * chunk
    fields = []
    for index, dtype in enumerate(DTYPES):
        rows = [a[index].astype(dtype) for a in arrays]
        rows += [np.zeros(length, dtype)] * (wanted - len(rows))
        block = np.stack(rows)
        if mesh is None:
            fields.append(block)
        else:
            from jax.sharding import NamedSharding, PartitionSpec

            spec: Any = PartitionSpec  # untyped in jax's stubs
            where = NamedSharding(mesh, spec(None, mesh.axis_names[0]))
            with jax.enable_x64(True):
                fields.append(jax.device_put(block.reshape(-1, chunk, length), where))
    return tuple(fields), learned, length * len(group)


def learning_rate(opt_state: Any) -> float:
    """The `learning_rate` of an `optax.inject_hyperparams` state in `opt_state`; NaN if none."""
    pending = [opt_state]
    while pending:
        node = pending.pop()
        hyper = getattr(node, "hyperparams", None)
        if isinstance(hyper, Mapping) and "learning_rate" in hyper:
            return float(hyper["learning_rate"])
        if isinstance(node, tuple | list):
            pending.extend(node)
    return math.nan


def _save(
    root: str | os.PathLike[str],
    step: int,
    trained: Mapping[str, Any],
    opt_state: Any,
    consumed: int,
    history: History,
    mesh: Any,
) -> None:
    save_checkpoint(
        root,
        step,
        trained,
        opt_state,
        batches=consumed,
        history=[asdict(s) for s in history.steps],
        sharded=mesh is not None,
    )
