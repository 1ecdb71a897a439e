"""The Triton Python-backend model that `linnet.triton.export(backend="python")` writes.

Stage: run inside Triton's Python backend stub. `export` copies this file
verbatim to `<model>/<version>/model.py`, beside the Linnet source and the
bound weights (`weights.safetensors`); everything else it needs comes from
`config.pbtxt`, whose string parameter `linnet` holds the settings as JSON
(`Settings` below). Triton calls `initialize(args)` once per instance,
`execute(requests)` with a batch of requests and `finalize()` at unload
(the contract of `triton_python_backend_utils`, imported as `pb_utils`).

Two modes:

- `entry`: one stateless entry. Each request's input tensors, by name, are the
  entry's inputs (a scalar arrives as `[1]`); its results are the outputs.
  A model that batches (`max_batch_size > 0`) gets the batch axis in the
  tensors already: the entry's batch generic is dynamic.
- `decoder`: a decoder with the serving entries `prefill_slots` /
  `decode_rows` (`linnet.serve.backends`), driven through Triton's sequence
  batcher. A request carries `INPUT_IDS` and the controls `START`, `END` and
  `CORRID`. `START` takes a free cache row for the correlation id and runs
  the prompt through `prefill_slots`; every later request of that id carries
  one token and runs `decode_rows` at the sequence's next position. Each
  response holds `LOGITS` (f32, the next-token logits) and `NEXT_TOKEN` (their
  argmax: the greedy choice). `END` frees the row after the response; so does
  an idle spell longer than the batcher's `max_sequence_idle_microseconds`
  (Triton drops such a sequence without telling the model, so the model
  keeps its own clock). The batcher has as many slots as the model has rows
  (`max_batch_size = Batch`, one instance), so a `START` that finds every row
  taken means Triton has already dropped one sequence whose idle time the
  model has not yet counted out: the least recently used row is taken. Requests of several sequences in one `execute` run as
  one `prefill_slots` and one `decode_rows` call; rows of other sequences
  compute unused logits at their own next position, which their next real
  token overwrites before anything reads it.

The entries run on `linnet.torch` or `linnet.onnx` (the `runtime` setting). An
error in a request (a `LinnetError`: a token out of range, a sequence without
`START`, a full cache) becomes that request's error response, not a crash of
the model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

try:  # Triton's stub provides this module; outside it the model cannot run
    import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - imported outside Triton (docs, type checks)
    pb_utils = None

from linnet.errors import LinnetError

Array = np.ndarray[Any, Any]
Settings = dict[str, Any]


def _numpy(value: Any) -> Array:
    """A torch tensor or NumPy array as a host NumPy array (bf16 as f32)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return np.asarray(value.numpy())
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array


def load_linnet_model(folder: Path, settings: Settings) -> Any:
    """The model of the version folder on the runtime the settings name."""
    source = folder / settings["source"]
    std = None if settings.get("std") is None else folder / settings["std"]
    weights = None if settings.get("weights") is None else folder / settings["weights"]
    options: dict[str, Any] = {
        "generics": settings["generics"],
        "weights": weights,
        "root": settings.get("root"),
        "std_root": std,
    }
    if settings["runtime"] == "onnx":
        from linnet.onnx import load_model

        return load_model(source, **options)
    import linnet.torch

    return linnet.torch.load(source, **options)


class _Sequence:
    """A live sequence: its cache row, tokens so far and last request time."""

    __slots__ = ("length", "row", "seen")

    def __init__(self, row: int, now: float) -> None:
        self.row = row
        self.length = 0
        self.seen = now


class TritonPythonModel:
    """Triton's Python-backend model class (see the module docstring)."""

    def initialize(self, args: dict[str, str]) -> None:
        if pb_utils is None:  # pragma: no cover - only inside Triton's stub
            raise RuntimeError("this model runs inside Triton's Python backend")
        config = json.loads(args["model_config"])
        self.settings: Settings = json.loads(config["parameters"]["linnet"]["string_value"])
        folder = Path(args["model_repository"]) / args["model_version"]
        self.model = load_linnet_model(folder, self.settings)
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.sequences: dict[int, _Sequence] = {}
        if self.settings["mode"] == "decoder":
            from linnet.serve.backends import decoder_for

            self.decoder = decoder_for(self.model)
            batching = config.get("sequence_batching", {})
            idle = int(batching.get("max_sequence_idle_microseconds", 0))
            self.idle_seconds = idle / 1e6 if idle > 0 else None

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.settings["mode"] == "decoder":
            return self._decode_requests(requests)
        return [self._respond(lambda r=r: self._run_entry(r)) for r in requests]

    def finalize(self) -> None:
        self.sequences.clear()
        self.model = None

    # -- one stateless entry ---------------------------------------------------------------

    def _run_entry(self, request: Any) -> list[Any]:
        arrays = []
        for spec in self.settings["inputs"]:
            array = pb_utils.get_input_tensor_by_name(request, spec["name"]).as_numpy()
            arrays.append(array.reshape(()) if spec["scalar"] else array)
        result = self.model.run_entry(
            self.settings["entry"], arrays, generics=self.settings["entry_generics"] or None
        )
        results = result if isinstance(result, tuple) else (result,)
        tensors = []
        for spec, value in zip(self.settings["outputs"], results, strict=True):
            array = _numpy(value)
            if spec["scalar"]:
                array = array.reshape(1)
            tensors.append(pb_utils.Tensor(spec["name"], np.ascontiguousarray(array)))
        return tensors

    @staticmethod
    def _respond(run: Any) -> Any:
        try:
            return pb_utils.InferenceResponse(output_tensors=run())
        except LinnetError as exc:
            return pb_utils.InferenceResponse(
                output_tensors=[], error=pb_utils.TritonError(exc.message)
            )

    # -- a decoder through the sequence batcher --------------------------------------------

    def _decode_requests(self, requests: list[Any]) -> list[Any]:
        now = time.monotonic()
        self._expire(now)
        parsed: list[tuple[int, bool, bool, Array]] = []
        for request in requests:
            parsed.append(self._parse(request))
        responses: list[Any] = [None] * len(requests)
        pending = list(range(len(requests)))
        while pending:  # rounds in which each sequence appears once, in arrival order
            taken: set[int] = set()
            batch = []
            for i in pending:
                if parsed[i][0] not in taken:
                    taken.add(parsed[i][0])
                    batch.append(i)
            pending = [i for i in pending if i not in batch]
            self._round(batch, parsed, responses, now)
        return responses

    def _parse(self, request: Any) -> tuple[int, bool, bool, Array]:
        names = self.settings["sequence"]

        def control(name: str) -> int:
            return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])

        ids = pb_utils.get_input_tensor_by_name(request, self.settings["decoder"]["input"])
        return (
            control(names["corrid"]),
            bool(control(names["start"])),
            bool(control(names["end"])),
            np.asarray(ids.as_numpy()).reshape(-1),
        )

    def _round(
        self,
        batch: list[int],
        parsed: list[tuple[int, bool, bool, Array]],
        responses: list[Any],
        now: float,
    ) -> None:
        starts: list[int] = []
        steps: list[int] = []
        for i in batch:
            corrid, start, _, ids = parsed[i]
            problem = self._admit(corrid, start, ids, now)
            if problem is not None:
                responses[i] = self._error(problem)
            else:
                (starts if start else steps).append(i)
        for group, run in ((starts, self._prefill), (steps, self._step)):
            if not group:
                continue
            try:
                logits = run([parsed[i] for i in group])
            except LinnetError as exc:
                for i in group:
                    responses[i] = self._error(exc.message)
                    self._release(parsed[i][0])
                continue
            for i, row_logits in zip(group, logits, strict=True):
                responses[i] = self._logits_response(row_logits)
        for i in batch:
            corrid, _, end, _ = parsed[i]
            if end:
                self._release(corrid)

    def _admit(self, corrid: int, start: bool, ids: Array, now: float) -> str | None:
        """Why the request cannot run (None if it can); a START takes a cache row."""
        rows, max_seq = self.decoder.rows, self.decoder.max_seq
        if start:
            if not 1 <= ids.size <= max_seq:
                return f"a START request carries 1 to {max_seq} token ids, got {ids.size}"
            live = self.sequences.pop(corrid, None)
            used = {s.row for s in self.sequences.values()}
            free = [r for r in range(rows) if r not in used]
            if live is not None:
                free.insert(0, live.row)
            if not free:  # Triton dropped a sequence idle past its timeout before we did
                oldest = min(self.sequences, key=lambda c: self.sequences[c].seen)
                free.append(self.sequences.pop(oldest).row)
            self.sequences[corrid] = _Sequence(free[0], now)
            return None
        live = self.sequences.get(corrid)
        if live is None:
            return f"sequence {corrid} has no START (or it ended, or sat idle past the timeout)"
        if ids.size != 1:
            return f"a request after START carries one token id, got {ids.size}"
        if live.length >= max_seq:
            return f"sequence {corrid} fills the cache ({max_seq} positions)"
        live.seen = now
        return None

    def _prefill(self, items: list[tuple[int, bool, bool, Array]]) -> Array:
        width = max(ids.size for _, _, _, ids in items)
        tokens = np.zeros((len(items), width), np.int32)
        for m, (_, _, _, ids) in enumerate(items):
            tokens[m, : ids.size] = ids
        lengths = np.array([ids.size for _, _, _, ids in items], np.int32)
        slots = np.array([self.sequences[c].row for c, _, _, _ in items], np.int32)
        logits = _numpy(self.decoder.prefill(tokens, slots, lengths))
        for corrid, _, _, ids in items:
            self.sequences[corrid].length = ids.size
        return logits

    def _step(self, items: list[tuple[int, bool, bool, Array]]) -> list[Array]:
        rows, max_seq = self.decoder.rows, self.decoder.max_seq
        tokens = np.zeros((rows, 1), np.int32)
        positions = np.zeros(rows, np.int32)
        for live in self.sequences.values():  # idle rows write at their own next position
            positions[live.row] = min(live.length, max_seq - 1)
        for corrid, _, _, ids in items:
            live = self.sequences[corrid]
            tokens[live.row, 0] = ids[0]
            positions[live.row] = live.length
        logits = _numpy(self.decoder.decode(tokens, positions))
        picked = []
        for corrid, _, _, _ in items:
            live = self.sequences[corrid]
            picked.append(logits[live.row])
            live.length += 1
        return picked

    def _logits_response(self, logits: Array) -> Any:
        values = np.asarray(logits, np.float32).reshape(-1)
        token = np.array([int(np.argmax(values))], np.int32)
        if self.batched:
            values, token = values[None], token[None]
        names = self.settings["decoder"]
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(names["logits"], np.ascontiguousarray(values)),
                pb_utils.Tensor(names["next_token"], token),
            ]
        )

    @staticmethod
    def _error(message: str) -> Any:
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))

    def _release(self, corrid: int) -> None:
        self.sequences.pop(corrid, None)

    def _expire(self, now: float) -> None:
        if self.idle_seconds is None:
            return
        for corrid, live in list(self.sequences.items()):
            if now - live.seen > self.idle_seconds:
                del self.sequences[corrid]
