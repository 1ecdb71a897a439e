"""`export`: a Linnet model as one model of a Triton Inference Server repository.

Stage: a deployment target after the ONNX exporter (issue 19). In: the source,
its generics and weights, as `linnet.onnx.export_model` takes them. Out:

    <output>/<name>/config.pbtxt
    <output>/<name>/<version>/model.onnx                 backend="onnx"
    <output>/<name>/<version>/model.py, linnet/, weights.safetensors   backend="python"

`backend="onnx"`: the entry exported by `export_model` (self-contained, its
weights inside; `model.onnx.<v>.data` beside it past `EXTERNAL_DATA_BYTES`),
served by Triton's ONNX Runtime backend (platform `onnxruntime_onnx`). Generics
named in `dynamic` stay symbolic: their axes are -1, and when one of them is
the first axis of every input and every output (the batch) the model batches
(`max_batch_size`, the axis left out of the dims, `dynamic_batching`). An entry
that reads or writes `state` (a KV cache) cannot be served this way, since
Triton's ONNX Runtime backend does not carry ONNX outputs back into inputs
between requests: that is a `LinnetError` pointing at `backend="python"`.

`backend="python"`: `linnet.triton.python_model` copied as `model.py`, with
the source (its `.linnet` files) and the weights bound by path, for Triton's
Python backend; the entries run on `linnet.torch` or `linnet.onnx`
(`runtime`). A decoder (a root block with the serving entries `prefill_slots`
and `decode_rows`, picked with `entry=None` or by naming one of them) is
served through the sequence batcher (`CORRID`, `START`, `END`): one cache row
of `Batch` per live sequence, `max_batch_size = Batch`; see `python_model`.
Any other entry is served stateless as with ONNX.

Writes: the version folder is built beside its place under a temporary name
and renamed in whole (an earlier folder of that version is moved aside first
and removed after), then `config.pbtxt` is written with `linnet.atomic`: a
reader never sees half a version folder or half a config.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from linnet.atomic import ensure_folder, write_bytes
from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.records import field, record
from linnet.triton.config import (
    ONNX_PLATFORM,
    PYTHON_BACKEND,
    TRITON_DTYPES,
    SequenceControls,
    TritonTensor,
    render,
)

Backend = Literal["onnx", "python"]
EXTERNAL_DATA_BYTES = 2**30
"""Weights past this many bytes go to a data file beside `model.onnx`."""
DEFAULT_MAX_BATCH = 8
DECODER_ENTRIES = ("prefill_slots", "decode_rows")
DECODER_INPUT = "INPUT_IDS"
DECODER_LOGITS = "LOGITS"
DECODER_NEXT_TOKEN = "NEXT_TOKEN"
SOURCE_FOLDER = "linnet"
WEIGHTS_FILE = "weights.safetensors"


@record(frozen=True)
class Repository:
    """What `export` wrote: the model's folder, its config and the tensors Triton sees."""

    root: Path
    name: str
    version: int
    backend: Backend
    config: str
    inputs: tuple[TritonTensor, ...]
    outputs: tuple[TritonTensor, ...]
    max_batch_size: int
    sequence: SequenceControls | None = None
    files: tuple[Path, ...] = field(default_factory=tuple)

    @property
    def model_folder(self) -> Path:
        return self.root / self.name

    @property
    def config_path(self) -> Path:
        return self.model_folder / "config.pbtxt"

    @property
    def version_folder(self) -> Path:
        return self.model_folder / str(self.version)


def export(
    source: CheckedProgram | str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    name: str | None = None,
    entry: str | None = None,
    generics: Mapping[str, object],
    weights: Any,
    bindings: Any = None,
    root: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
    backend: Backend = "onnx",
    version: int = 1,
    dynamic: Sequence[str] | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH,
    runtime: Literal["torch", "onnx"] = "torch",
    idle_seconds: float = 60.0,
) -> Repository:
    """Write `<output>/<name>/` for Triton (see the module docstring).

    `name` defaults to the source's stem (its folder's name for `src/` or a
    package). `max_batch_size` is the batch limit when the entry batches
    (ONNX, or a stateless Python entry); a decoder's is its `Batch` generic.
    `runtime` and `idle_seconds` (how long a sequence may sit idle before its
    cache row is freed) concern the Python backend.
    """
    if backend not in ("onnx", "python"):
        raise LinnetError(f"linnet.triton: backend must be 'onnx' or 'python', not {backend!r}")
    if runtime not in ("torch", "onnx"):
        raise LinnetError(f"linnet.triton: runtime must be 'torch' or 'onnx', not {runtime!r}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise LinnetError(f"linnet.triton: version must be a positive integer, not {version!r}")
    if max_batch_size < 1:
        raise LinnetError(f"linnet.triton: max_batch_size must be at least 1, not {max_batch_size}")
    if idle_seconds <= 0:
        raise LinnetError(f"linnet.triton: idle_seconds must be positive, not {idle_seconds}")
    model_name = name if name is not None else _default_name(source)
    _check_name(model_name)
    from linnet.pipeline import check_program

    job = _Job(
        program=check_program(source, std_root),
        source=source,
        folder=Path(output) / model_name,
        name=model_name,
        entry=entry,
        generics=dict(generics),
        weights=weights,
        bindings=bindings,
        root=root,
        std_root=std_root,
        version=version,
        dynamic=tuple(dynamic or ()),
        max_batch_size=max_batch_size,
    )
    if backend == "onnx":
        return _export_onnx(job)
    return _export_python(job, runtime, idle_seconds)


@record(frozen=True, kw_only=True)
class _Job:
    """The caller's choices, the source checked and the model folder named."""

    program: CheckedProgram
    source: CheckedProgram | str | os.PathLike[str]
    folder: Path
    name: str
    entry: str | None
    generics: dict[str, object]
    weights: Any
    bindings: Any
    root: str | None
    std_root: str | os.PathLike[str] | None
    version: int
    dynamic: tuple[str, ...]
    max_batch_size: int

    def repository(self, backend: Backend, config: str, *rest: Any) -> Repository:
        return Repository(self.folder.parent, self.name, self.version, backend, config, *rest)


# -- ONNX Runtime backend -----------------------------------------------------------------


def _export_onnx(job: _Job) -> Repository:
    exported = _exported(job, job.weights, job.bindings, "onnx")
    if job.weights is None and any(io.role == "param" for io in exported.inputs):
        raise LinnetError(
            "linnet.triton: backend='onnx' needs weights= (the model.onnx must hold them)"
        )
    inputs, outputs, batch = _interface(exported, job.dynamic, TRITON_DTYPES)
    limit = job.max_batch_size if batch else 0
    config = render(
        job.name,
        platform=ONNX_PLATFORM,
        inputs=inputs,
        outputs=outputs,
        max_batch_size=limit,
        dynamic_batching=batch,
    )

    def write(folder: Path) -> None:
        exported.save(folder / "model.onnx", limit=EXTERNAL_DATA_BYTES)

    files = _write_model(job.folder, job.version, write, config)
    return job.repository("onnx", config, inputs, outputs, limit, None, files)


def _exported(job: _Job, weights: Any, bindings: Any, backend: Backend) -> Any:
    """The entry through `export_model`, refused if it reads or writes state."""
    try:
        from linnet.onnx.export.api import export_model
    except ImportError:  # pragma: no cover - onnx missing
        raise LinnetError(
            "linnet.triton needs the onnx package: `pip install 'linnet-lang[onnx]'`"
        ) from None
    exported = export_model(
        job.program,
        generics=job.generics,
        weights=weights,
        bindings=bindings,
        entry=job.entry,
        root=job.root,
        std_root=job.std_root,
        dynamic=job.dynamic,
    )
    roles = ("state", "next_state")
    stateful = sorted(
        {str(io.path) for io in (*exported.inputs, *exported.outputs) if io.role in roles}
    )
    if stateful:
        fn = exported.function.name
        more = f" and {len(stateful) - 2} more" if len(stateful) > 2 else ""
        reads = (
            f"linnet.triton: entry `{fn}` reads or writes state ({', '.join(stateful[:2])}{more})"
        )
        if backend == "onnx":
            raise LinnetError(
                f"{reads}, which Triton's ONNX Runtime backend cannot keep between requests; "
                "export it with backend='python' (a decoder with prefill_slots/decode_rows is "
                "served through the sequence batcher there)"
            )
        raise LinnetError(
            f"{reads}; backend='python' keeps state per sequence for a decoder only: a root "
            f"block with {' and '.join(DECODER_ENTRIES)}, exported with entry=None"
        )
    return exported


def _interface(
    exported: Any, dynamic: tuple[str, ...], dtypes: Mapping[str, str]
) -> tuple[tuple[TritonTensor, ...], tuple[TritonTensor, ...], bool]:
    """The entry's inputs and outputs as Triton tensors, and whether the model batches."""
    graph = exported.model.graph
    shapes = {
        vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in (*graph.input, *graph.output)
    }
    inputs = [io for io in exported.graph_inputs if io.role == "input"]
    outputs = [io for io in exported.outputs if io.role == "output"]
    firsts = {str(shapes[io.name][0]) if shapes[io.name] else "" for io in (*inputs, *outputs)}
    batch = len(firsts) == 1 and next(iter(firsts)) in dynamic

    def tensor(io: Any) -> TritonTensor:
        dims = [-1 if isinstance(d, str) else int(d) for d in shapes[io.name]]
        if batch:
            dims = dims[1:]
        scalar = not shapes[io.name]
        return TritonTensor(io.name, dtypes[io.type.dtype], tuple(dims) or (1,), scalar)

    return tuple(map(tensor, inputs)), tuple(map(tensor, outputs)), batch


# -- Python backend -----------------------------------------------------------------------


def _export_python(job: _Job, runtime: str, idle_seconds: float) -> Repository:
    from linnet.pipeline import bind, bind_weights

    base, files = _source_files(job.source)
    settings: dict[str, Any] = {
        "runtime": runtime,
        "generics": job.generics,
        "root": job.root,
        "source": f"{SOURCE_FOLDER}/{base}" if base else SOURCE_FOLDER,
        "std": None if job.std_root is None else "std",
    }
    sequence = None
    if _is_decoder(job.program, job.root, job.entry):
        from linnet.serve.backends import batching_shape

        model = bind(job.program, root=job.root, generics=job.generics)
        limit, _ = batching_shape(model, None, None)
        inputs: tuple[TritonTensor, ...] = (TritonTensor(DECODER_INPUT, "TYPE_INT32", (-1,)),)
        outputs: tuple[TritonTensor, ...] = (
            TritonTensor(DECODER_LOGITS, "TYPE_FP32", (-1,)),
            TritonTensor(DECODER_NEXT_TOKEN, "TYPE_INT32", (1,)),
        )
        sequence = SequenceControls(idle_microseconds=max(1, round(idle_seconds * 1e6)))
        names = {"input": DECODER_INPUT, "logits": DECODER_LOGITS, "next_token": DECODER_NEXT_TOKEN}
        controls = {"start": sequence.start, "end": sequence.end, "corrid": sequence.corrid}
        settings.update(mode="decoder", decoder=names, sequence=controls)
    else:
        exported = _exported(job, None, None, "python")
        python_dtypes = {**TRITON_DTYPES, "bf16": "TYPE_FP32"}  # NumPy has no bf16
        inputs, outputs, batch = _interface(exported, job.dynamic, python_dtypes)
        limit = job.max_batch_size if batch else 0
        fn = exported.function.name
        own = _entry_generic_names(job.program, job.root, fn)
        given = {k: v for k, v in job.generics.items() if k in own}
        settings.update(
            mode="entry",
            entry=fn,
            entry_generics=given,
            inputs=[{"name": t.name, "scalar": t.scalar} for t in inputs],
            outputs=[{"name": t.name, "scalar": t.scalar} for t in outputs],
        )
        rest = {k: v for k, v in job.generics.items() if k not in own}
        model = bind(job.program, root=job.root, generics=rest)
    arrays = {}
    if job.weights is not None:
        arrays = dict(bind_weights(model, job.weights, bindings=job.bindings).arrays)
    settings["weights"] = WEIGHTS_FILE if arrays else None
    config = render(
        job.name,
        backend=PYTHON_BACKEND,
        inputs=inputs,
        outputs=outputs,
        max_batch_size=limit,
        sequence=sequence,
        parameters={"linnet": json.dumps(settings, sort_keys=True)},
    )

    def write(folder: Path) -> None:
        from linnet.weights import save_safetensors

        shutil.copyfile(Path(__file__).with_name("python_model.py"), folder / "model.py")
        for relative, text in files.items():
            target = folder / SOURCE_FOLDER / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if job.std_root is not None:
            shutil.copytree(Path(job.std_root), folder / "std", ignore=_only_linnet)
        if arrays:
            save_safetensors(arrays, folder / WEIGHTS_FILE)

    written = _write_model(job.folder, job.version, write, config)
    return job.repository("python", config, inputs, outputs, limit, sequence, written)


def _is_decoder(program: CheckedProgram, root: str | None, entry: str | None) -> bool:
    from linnet.target import root_block

    block = root_block(program, root)
    if block is None:
        return False
    names = {n for n, m in block.methods.items() if m.kind == "entry"}
    has = all(e in names for e in DECODER_ENTRIES)
    return has and (entry is None or entry in DECODER_ENTRIES)


def _entry_generic_names(program: CheckedProgram, root: str | None, fn: str) -> set[str]:
    from linnet.target import Target, entry_info

    return {g.name for g in entry_info(program, Target(root=root, entry=fn)).generics}


def _source_files(source: CheckedProgram | str | os.PathLike[str]) -> tuple[str, dict[str, str]]:
    """The Linnet files to copy (relative path -> text) and the path to load from."""
    if isinstance(source, str) and "\n" in source:
        return "model.linnet", {"model.linnet": source}
    if isinstance(source, CheckedProgram):
        raise LinnetError(
            "linnet.triton: backend='python' copies the source files; pass a path or source "
            "text, not a checked program"
        )
    path = Path(source)
    if path.is_file():
        return path.name, {path.name: path.read_text(encoding="utf-8")}
    found = {
        str(p.relative_to(path)): p.read_text(encoding="utf-8")
        for p in sorted(path.rglob("*"))
        if p.is_file() and (p.suffix == ".linnet" or p.name == "linnet.toml")
    }
    if not found:
        raise LinnetError(f"linnet.triton: no .linnet files under {path}")
    return "", found


def _only_linnet(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not (Path(folder, n).is_dir() or n.endswith(".linnet"))]


# -- names and writes ---------------------------------------------------------------------


def _default_name(source: CheckedProgram | str | os.PathLike[str]) -> str:
    if isinstance(source, CheckedProgram) or (isinstance(source, str) and "\n" in source):
        raise LinnetError("linnet.triton: name= is needed when the source is not a path")
    path = Path(source).resolve()
    if path.is_file():
        return path.stem if path.stem != "lib" else path.parent.parent.name
    return path.parent.name if path.name == "src" else path.name


def _check_name(name: str) -> None:
    allowed = name and all(c.isalnum() or c in "-_." for c in name) and name[0] not in ".-"
    if not allowed:
        raise LinnetError(
            f"linnet.triton: model name {name!r} must be letters, digits, '-', '_' or '.' "
            "(it is a folder of the repository and a URL path segment)"
        )


def _write_model(model_folder: Path, version: int, write: Any, config: str) -> tuple[Path, ...]:
    """Build the version folder under a temporary name, rename it in, then the config."""
    ensure_folder(model_folder, what="model folder")
    final = model_folder / str(version)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.linnet-tmp-", dir=model_folder))
    try:
        write(staging)
        files = sorted(p.relative_to(staging) for p in staging.rglob("*") if p.is_file())
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{version}.linnet-old-", dir=model_folder))
            os.replace(final, old / "v")
        os.replace(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise LinnetError(f"linnet.triton: cannot write {final}: {exc.strerror or exc}") from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    write_bytes(model_folder / "config.pbtxt", config.encode("utf-8"))
    return tuple(final / f for f in files)
