"""The engine's view of a model: two batching entries, sampling, state and weights.

Stage: between `Engine` and a loaded model (issue 14). The engine needs a
decoder whose root block has the continuous-batching entries of the examples:

- `prefill_slots<M, S>(tokens [M, S], slots [M], lengths [M]) -> [M, Vocab]`
- `decode_rows(tokens [Batch, 1], positions [Batch]) -> [Batch, Vocab]`

and, when it has it (every decoder example does), the engine decodes through

- `decode_slots<M>(tokens [M, 1], slots [M], positions [M]) -> [M, Vocab]`

instead, which computes only the `M` rows it names; and the generics `Batch` (cache rows) and `MaxSeq` (cache positions).

A decoder whose rotary tables change for the whole sequence at some length (Phi-3's
longrope: the `rope_factors` buffer present, switching from the short to the long
factors once a sequence exceeds `RopeOriginalMaxSeq` tokens) has the keys cached
before that length rotated the old way; transformers' `generate` then recomputes the
whole sequence once, and `recompute_length` tells the engine when to do the same.
`decoder_for`
wraps a `linnet.torch.LinnetModule` (`TorchDecoder`: inputs go to the module's
device, logits stay there, sampling runs as torch ops) or a
`linnet.onnx.load_model` model (`OnnxDecoder`: logits come back as NumPy,
sampling runs in NumPy) or a `linnet.jax.load_model` model (`JaxDecoder`: XLA
runs the entries with the caches on the device, sampling runs in NumPy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any, Protocol

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.bind import BoundModel
from linnet.serve.requests import TokenLogprob
from linnet.serve.sampling import Choice, choose_numpy

Array = np.ndarray[Any, Any]
ENTRIES = ("prefill_slots", "decode_rows")
SLOTTED = "decode_slots"
LONGROPE_FACTORS = "rope_factors"
LONGROPE_SWITCH = "RopeOriginalMaxSeq"
PREPACK_SHARE = 0.3
"""How much of an ONNX Runtime model's weight bytes its full-batch decode session may hold
again, pre-packed (`OnnxDecoder`): the server's memory grows by at most this share.

Chosen for memory: the issue's bound is about 1.3x the other servers' peak
(`bench/serve.py --shape tinyllama --clients 1,8 --servers onnx`: 4.26-4.45 GiB
unpacked, 5.54-5.71 GiB with 0.3, under transformers serve's 4.62 x 1.3). Gain at
TinyLlama's shape (`bench/onnx_prepack.py`, load 4.4-5.0 on 2 cores, CPU time per
step, 4 alternated rounds): one row 357 ms; 8 rows 797 ms unpacked (3.6x one row's
aggregate), 676 ms with 0.3 (4.2x); with 1.0, 426 ms against 783 (6.3x) for a peak
of 7.9 GiB: every weight held twice, which on a machine short of memory also pushes
the shared copy's pages out and slows every other call. On a quiet machine (load
0.4-0.7) the same bench gave 5.6 tokens/s at one row, 19.1 at 8 unpacked (3.4x),
24.3 with 0.3 (4.3x); and `bench/serve.py ... --prepack SHARE` (one stream, then 8;
load 0.0-1.6, the 8-stream round includes its 8 prefills): 0 gave 5.3 / 18.4 (3.5x,
4.27 GiB), 0.3 gave 5.7 / 22.3 (3.9x) and 5.5 / 24.3 (4.4x, 5.55 GiB), 0.4 gave
5.4 / 25.9 (4.8x) and 6.1 / 25.3 (4.1x, 5.90-6.00 GiB), 0.5 5.5 / 28.5 (5.1x,
6.72 GiB); 1.0 at load 3.5 5.3 / 33.6 (6.3x, 8.32 GiB)."""


class Decoder(Protocol):
    """What `Engine` drives (see the module docstring)."""

    rows: int
    max_seq: int
    description: str
    slotted: bool
    """Whether the model has `decode_slots` (see the module docstring)."""
    recompute_at: int | None
    """The sequence length at which the whole sequence is prefilled again, or None
    (`recompute_length`)."""

    def prefill(self, tokens: Array, slots: Array, lengths: Array) -> Any: ...
    def decode(self, tokens: Array, positions: Array) -> Any: ...
    def decode_slots(self, tokens: Array, slots: Array, positions: Array) -> Any: ...
    def choose(
        self, logits: Any, members: Sequence[int], choices: Sequence[Choice]
    ) -> list[tuple[int, TokenLogprob | None]]: ...
    def reset(self) -> None: ...
    def load_weights(self, weights: Any, bindings: Any = None) -> None: ...
    def copy_weights(self, tensors: Mapping[str, Any]) -> None: ...


def batching_shape(model: BoundModel, rows: int | None, max_seq: int | None) -> tuple[int, int]:
    """The cache rows and positions: the `Batch` and `MaxSeq` generics unless given."""
    missing = [e for e in ENTRIES if e not in model.entries]
    if missing:
        listed = ", ".join(f"`{n}`" for n in model.entries) or "none"
        raise LinnetError(
            f"the model has no {' or '.join(f'`{m}`' for m in missing)} entry, which "
            f"linnet.serve needs for continuous batching (entries: {listed}); see "
            "examples/01-llama for the entries a decoder provides"
        )
    found = []
    for name, given in (("Batch", rows), ("MaxSeq", max_seq)):
        value = given if given is not None else model.generics.get(name)
        if not isinstance(value, int) or value < 1:
            raise LinnetError(
                f"linnet.serve: the model has no integer generic `{name}`; pass "
                f"{'rows' if name == 'Batch' else 'max_seq'}= to the Engine"
            )
        found.append(value)
    return found[0], found[1]


def recompute_length(model: BoundModel, present: Set[str]) -> int | None:
    """The sequence length at which a served sequence must be computed again from its
    first token, or None: with Phi-3's longrope (`rope_factors` present), a call whose
    last position + 1 exceeds `RopeOriginalMaxSeq` rotates every position with the long
    factors, so at `RopeOriginalMaxSeq + 1` tokens the keys cached with the short ones
    are stale, and transformers' `generate` prefills the whole sequence once
    (`Phi3ForCausalLM.prepare_inputs_for_generation`)."""
    if LONGROPE_FACTORS not in present:
        return None
    switch = model.generics.get(LONGROPE_SWITCH)
    if not isinstance(switch, int):
        raise LinnetError(
            f"linnet.serve: the model has `{LONGROPE_FACTORS}` (longrope) but no integer "
            f"generic `{LONGROPE_SWITCH}`, so the engine cannot tell when the rotary factors "
            "switch"
        )
    return switch + 1


def decoder_for(
    model: Any,
    rows: int | None = None,
    max_seq: int | None = None,
    prepack: float | None = None,
    threads: int | None = None,
) -> Decoder:
    """The `Decoder` of a loaded model (see the module docstring); `prepack` is
    `OnnxDecoder`'s share, `threads` `TorchDecoder`'s."""
    kind = type(model).__module__
    if prepack is not None and not kind.startswith("linnet.onnx"):
        raise LinnetError(
            "linnet.serve.Engine: prepack= is the share of weights an ONNX Runtime model's "
            f"decode pre-packs; this model is a {type(model).__name__} ({kind})"
        )
    if threads is not None and not kind.startswith("linnet.torch"):
        raise LinnetError(
            "linnet.serve.Engine: threads= is the intra-op thread count of a linnet.torch "
            f"model's calls; this model is a {type(model).__name__} ({kind})"
        )
    if kind.startswith("linnet.onnx"):
        return OnnxDecoder(model, rows, max_seq, prepack)
    if kind.startswith("linnet.torch"):
        return TorchDecoder(model, rows, max_seq, threads)
    if kind.startswith("linnet.jax"):
        return JaxDecoder(model, rows, max_seq)
    raise LinnetError(
        f"linnet.serve.Engine takes a linnet.torch module, a linnet.onnx.load_model or a "
        f"linnet.jax.load_model model, got {type(model).__name__}"
    )


class TorchDecoder:
    """A `linnet.torch.LinnetModule`; logits stay on its device.

    On the CPU each entry call runs with the intra-op thread count that
    `linnet.serve.threads.ThreadChooser` measures to be faster for its shape, 1 or the
    count of the thread that made the decoder (a host where another process takes a
    core makes every multi-threaded op wait for a preempted thread); `threads` fixes
    the count instead.
    """

    def __init__(
        self, module: Any, rows: int | None, max_seq: int | None, threads: int | None = None
    ) -> None:
        import torch

        from linnet.serve.threads import ThreadChooser

        self.torch = torch
        self.module = module
        self.rows, self.max_seq = batching_shape(module.linnet_model, rows, max_seq)
        self.slotted = SLOTTED in module.linnet_model.entries
        self.recompute_at = recompute_length(module.linnet_model, module.present_paths)
        self.device = next(iter(module.buffers()), torch.zeros(())).device
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):  # fmt: skip
            raise LinnetError(
                f"linnet.serve.Engine: threads= must be a count of at least 1, not {threads!r}"
            )
        self.chooser: ThreadChooser | None = None
        """Each CPU call's thread count (None on another device)."""
        if self.device.type == "cpu":
            counts = (threads,) if threads is not None else (1, torch.get_num_threads())
            self.chooser = ThreadChooser(counts)
        where = f"{self.device}"
        if self.chooser is not None:
            shown = " or ".join(str(c) for c in self.chooser.candidates)
            where += f", {shown} thread{'s' if self.chooser.candidates != (1,) else ''}"
        self.description = f"linnet.torch on {where}"

    def _entry(self, name: str, inputs: Sequence[Array]) -> Any:
        torch = self.torch
        tensors = [torch.from_numpy(x).to(self.device) for x in inputs]

        def run() -> Any:
            with torch.no_grad():
                return self.module.run_entry(name, tensors)

        if self.chooser is None:
            return run()
        return self.chooser.call((name, *(x.shape for x in inputs)), run)

    def prefill(self, tokens: Array, slots: Array, lengths: Array) -> Any:
        return self._entry("prefill_slots", [tokens, slots, lengths])

    def decode(self, tokens: Array, positions: Array) -> Any:
        return self._entry("decode_rows", [tokens, positions])

    def decode_slots(self, tokens: Array, slots: Array, positions: Array) -> Any:
        return self._entry(SLOTTED, [tokens, slots, positions])

    def choose(
        self, logits: Any, members: Sequence[int], choices: Sequence[Choice]
    ) -> list[tuple[int, TokenLogprob | None]]:
        from linnet.serve.sampling import choose_torch

        if _leading(members):  # decode_slots: the members are the first rows, no copy
            return choose_torch(logits[: len(members)], choices)
        index = self.torch.tensor(list(members), device=logits.device)
        return choose_torch(logits.index_select(0, index), choices)

    def reset(self) -> None:
        self.module.reset_state()

    def load_weights(self, weights: Any, bindings: Any = None) -> None:
        """Bind `weights` like `linnet.torch.load` and copy them into the module's tensors."""
        from linnet.torch.dtypes import to_torch
        from linnet.torch.load import bind_weights
        from linnet.weights.safetensors import release_mapped

        model = self.module.linnet_model
        arrays = bind_weights(model, weights, bindings=bindings)
        with self.torch.no_grad():
            for path, array in arrays.items():
                target = self.module.tensor(path)
                target.copy_(to_torch(array, model.tensors[path].type.dtype, target.device))
                release_mapped(array)  # the file's pages, once copied (as LinnetModule does)

    def copy_weights(self, tensors: Mapping[str, Any]) -> None:
        """Copy torch tensors (any device and float dtype) or arrays into the weights at
        their Linnet paths, in place: no binding, no file, no trip through the host for
        tensors already on a device (how `linnet.train.grpo` refreshes the sampler)."""
        torch = self.torch
        model = self.module.linnet_model
        targets = {}
        for path, value in tensors.items():
            t = model.tensors.get(path)
            if (
                t is None
                or t.kind not in ("param", "buffer")
                or path not in self.module.present_paths
            ):
                raise LinnetError(f"copy_weights: the model has no weight at `{path}`")
            source = (
                value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
            )
            if tuple(source.shape) != tuple(t.type.shape):
                raise LinnetError(
                    f"copy_weights: `{path}` has shape {list(t.type.shape)}, got {list(source.shape)}"
                )
            targets[path] = source
        with torch.no_grad():
            for path, source in targets.items():
                self.module.tensor(path).copy_(source.detach())


class _EntryDecoder:
    """A model whose entries run by name on host arrays (`run_entry`): ONNX Runtime's
    and JAX's. The logits come back to the host for sampling: the whole `[rows, Vocab]`,
    since slicing on the device first would make (or compile) one more program per
    slice size."""

    def __init__(self, model: Any, rows: int | None, max_seq: int | None) -> None:
        self.model = model
        self.rows, self.max_seq = batching_shape(model.model, rows, max_seq)
        # `write_slots` into the cache is a scatter in place (`onnx.runtime.inplace`, or
        # XLA's into the donated state), so `decode_slots` works on the busy rows only
        self.slotted = SLOTTED in model.model.entries
        self.recompute_at = recompute_length(model.model, model.present)

    def prefill(self, tokens: Array, slots: Array, lengths: Array) -> Any:
        return self.model.run_entry("prefill_slots", [tokens, slots, lengths])

    def decode(self, tokens: Array, positions: Array) -> Any:
        return self.model.run_entry("decode_rows", [tokens, positions])

    def decode_slots(self, tokens: Array, slots: Array, positions: Array) -> Any:
        return self.model.run_entry(SLOTTED, [tokens, slots, positions])

    def choose(
        self, logits: Any, members: Sequence[int], choices: Sequence[Choice]
    ) -> list[tuple[int, TokenLogprob | None]]:
        rows = np.asarray(logits)
        picked = rows[: len(members)] if _leading(members) else rows[list(members)]
        return choose_numpy(picked, choices)

    def reset(self) -> None:
        self.model.reset_state()


class OnnxDecoder(_EntryDecoder):
    """A `linnet.onnx.load_model` model.

    The decode session of a full batch (every cache row, `rows` > 1) pre-packs the
    weights of its matrix products up to `prepack` (default `PREPACK_SHARE`) of the
    model's weight bytes
    (`linnet.onnx.runtime.prepack`): on the CPU, ONNX Runtime packs a weight that is
    a graph input on every call, which at several rows costs about as much as the
    product itself; pre-packed, that session holds its own copy of those weights.
    The other decode sizes and the prefills keep the one shared copy, and a single
    row keeps the unpacked matrix-vector path, which is as fast at one row.
    """

    def __init__(
        self, model: Any, rows: int | None, max_seq: int | None, prepack: float | None = None
    ) -> None:
        super().__init__(model, rows, max_seq)
        names = ", ".join(p if isinstance(p, str) else p[0] for p in model.providers)
        self.description = f"ONNX Runtime ({names})"
        share = PREPACK_SHARE if prepack is None else prepack
        if not 0 <= share <= 1:
            raise LinnetError(
                f"linnet.serve.Engine: prepack= is a share of the weights, from 0 to 1, not {share}"
            )
        self.prepack = int(share * model.weight_bytes) if self.rows > 1 else 0
        """The bytes of weights the full-batch decode session pre-packs at most."""

    def decode(self, tokens: Array, positions: Array) -> Any:
        return self.model.run_entry("decode_rows", [tokens, positions], prepack=self.prepack)

    def decode_slots(self, tokens: Array, slots: Array, positions: Array) -> Any:
        packed = self.prepack if len(tokens) == self.rows else 0
        return self.model.run_entry(SLOTTED, [tokens, slots, positions], prepack=packed)

    def load_weights(self, weights: Any, bindings: Any = None) -> None:
        """Bind `weights` like `linnet.onnx.load_model` and copy them into the bound weights."""
        from linnet.onnx.runtime.model import bind_weights

        arrays: Mapping[str, Array] = bind_weights(self.model.model, weights, bindings=bindings)
        self.model.update_weights(arrays)

    def copy_weights(self, tensors: Mapping[str, Any]) -> None:
        """Copy arrays or torch tensors by Linnet path into the bound weights (on the host)."""
        self.model.update_weights({path: _host(value) for path, value in tensors.items()})


class JaxDecoder(_EntryDecoder):
    """A `linnet.jax.load_model` model (`JaxModel`): each entry compiled by XLA once per
    shape (the engine's power-of-two buckets keep those few), the caches on the device
    and updated in place (donated)."""

    def __init__(self, model: Any, rows: int | None, max_seq: int | None) -> None:
        import jax

        if getattr(model, "tensor_parallel", None) is not None:
            raise LinnetError(
                "linnet.serve.Engine runs a linnet.jax model loaded without tensor_parallel= "
                "(mesh= works: XLA partitions each entry)"
            )
        super().__init__(model, rows, max_seq)
        where = "a mesh" if model.mesh is not None else str(jax.devices()[0])
        self.description = f"JAX on {where}"

    def load_weights(self, weights: Any, bindings: Any = None) -> None:
        """Bind `weights` like `linnet.jax.load_model` and place them on the device."""
        from linnet.jax.load import bind_weights

        self.model.update_weights(bind_weights(self.model.model, weights, bindings=bindings))

    def copy_weights(self, tensors: Mapping[str, Any]) -> None:
        """Copy JAX or NumPy arrays (or torch tensors, through the host) by Linnet path
        into the weights (`JaxModel.update_weights`; how `linnet.jax.grpo` refreshes the
        sampler from the policy's arrays without leaving the device)."""
        self.model.update_weights(
            {
                path: value if hasattr(value, "devices") else _host(value)
                for path, value in tensors.items()
            }
        )


def _leading(members: Sequence[int]) -> bool:
    """Whether `members` are the rows 0, 1, ... in order (a slice takes them)."""
    return all(m == i for i, m in enumerate(members))


def _host(value: Any) -> Array:
    """A NumPy array of `value` (a torch tensor is detached and brought to the host)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()  # NumPy has no bfloat16; update_weights converts back
        return np.asarray(value.numpy())
    return np.asarray(value)
