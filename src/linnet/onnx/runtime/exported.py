"""`ExportedSession`: an exported ONNX file run with the checks of its Linnet entry.

Stage: the runtime side of `export_model(dynamic=[...])`. An export with
dynamic generics takes any size for them, but ONNX Runtime knows nothing of
the entry's `where` clauses (`S <= Positions`) nor that two inputs share a
generic (`tokens [B, S]` and `mask [B, S]`): it would run, or fail deep in a
kernel. This wrapper binds each generic from the input axes that carry it
(the `dim_param`s, `linnet.ir.symbolic` polynomials), refuses inputs that
disagree, evaluates the clauses the exporter recorded (`linnet.where.<N>`
metadata, `linnet.onnx.export.assemble`) and only then runs the session.
Every refusal is a `LinnetError` naming the input or the clause.

`load_model` (`linnet.onnx.runtime.model`) makes its own sessions and checks
the same clauses by binding the entry; this wrapper is for a saved file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from linnet.errors import LinnetError
from linnet.ir.symbolic import RELATIONS, Poly, eval_dim_json, parse_poly


class ExportedSession:
    """An ONNX Runtime session over an exported entry, checked at its boundary.

    `model` is a `ModelProto`, a file path (its external data is left to ONNX
    Runtime: a model past 2 GB is never serialised here) or an `ExportedModel`
    (its `.model`, weights included: save a large one and pass the path);
    `providers` and `options` go to `onnxruntime.InferenceSession`.
    `run(feeds)` returns the outputs in graph order as `InferenceSession.run` does.
    """

    def __init__(
        self,
        model: Any,
        providers: Sequence[Any] | None = None,
        options: Any = None,
    ) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]

        proto, source = _proto(model)
        meta = {p.key: p.value for p in proto.metadata_props}
        self.entry = meta.get("linnet.entry", "main")
        names = meta.get("linnet.dynamic", "")
        self.dynamic: tuple[str, ...] = tuple(n for n in names.split(",") if n)
        self.where = [
            json.loads(value)
            for key, value in sorted(meta.items())
            if key.startswith("linnet.where.")
        ]
        self.inputs: dict[str, list[int | str | None]] = {}
        for value in proto.graph.input:
            dims: list[int | str | None] = []
            for d in value.type.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            self.inputs[value.name] = dims
        self.session = ort.InferenceSession(
            source,
            options,
            providers=list(providers or ["CPUExecutionProvider"]),
        )

    def sizes(self, feeds: Mapping[str, Any]) -> dict[str, int]:
        """The dynamic generics bound from `feeds`; LinnetError if inputs or clauses disagree."""
        owner = f"entry `{self.entry}`"
        values: dict[str, int] = {}
        seen: dict[str, str] = {}
        later: list[tuple[str, int, str, int]] = []
        for name, dims in self.inputs.items():
            if name not in feeds:
                continue
            shape = np.shape(feeds[name])
            if len(shape) != len(dims):
                raise LinnetError(
                    f"{owner}: input `{name}` has rank {len(shape)} but {len(dims)} is required"
                )
            for axis, (want, got) in enumerate(zip(dims, shape, strict=True)):
                if isinstance(want, int) and want != got:
                    raise LinnetError(f"{owner}: input `{name}` axis {axis} is {got}, not {want}")
                if not isinstance(want, str):
                    continue
                form = parse_poly(want, self.dynamic) if self.dynamic else want
                var = form.as_var() if isinstance(form, Poly) else None
                if var is None:
                    later.append((name, axis, want, int(got)))
                elif var in values and values[var] != got:
                    raise LinnetError(
                        f"{owner}: input `{name}` axis {axis} is {got}, but `{var}` is "
                        f"{values[var]} from input `{seen[var]}`"
                    )
                else:
                    values.setdefault(var, int(got))
                    seen.setdefault(var, name)
        for name, axis, want, got in later:
            form = parse_poly(want, self.dynamic)
            expected = form.evaluate(values) if isinstance(form, Poly) else form
            if expected != got:
                raise LinnetError(
                    f"{owner}: input `{name}` axis {axis} is {got} but `{want}` = {expected}"
                )
        for clause in self.where:
            lhs = eval_dim_json(clause["lhs"], values)
            rhs = eval_dim_json(clause["rhs"], values)
            if not RELATIONS[clause["rel"]](lhs, rhs):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                raise LinnetError(
                    f"constraint {clause['text']} does not hold for {shown} ({owner})"
                )
        return values

    def run(
        self, feeds: Mapping[str, Any], outputs: Sequence[str] | None = None
    ) -> list[np.ndarray[Any, Any]]:
        """Check the sizes (`sizes`), then run; the outputs in graph order."""
        self.sizes(feeds)
        result: list[np.ndarray[Any, Any]] = self.session.run(
            None if outputs is None else list(outputs), dict(feeds)
        )
        return result


def _proto(model: Any) -> tuple[onnx.ModelProto, str | bytes]:
    """The model's graph and metadata, and what `InferenceSession` reads."""
    if isinstance(model, onnx.ModelProto):
        return model, model.SerializeToString()
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        try:
            return onnx.load(path, load_external_data=False), path
        except OSError as exc:
            raise LinnetError(f"cannot read `{model}`: {exc.strerror or exc}") from None
    proto = getattr(model, "model", None)
    if isinstance(proto, onnx.ModelProto):
        return proto, proto.SerializeToString()
    raise LinnetError(
        f"ExportedSession needs a ModelProto, a file or an ExportedModel, not {type(model).__name__}"
    )
