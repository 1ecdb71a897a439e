"""Several exported entries of one model saved side by side, their weights in one data file.

Stage: after `export_model` (`ExportedModel`), for the entries of one model
exported from the same arrays (`prefill` and `decode`): `save_together` saves
them at once; `SavingTogether` takes them one at a time, as they are
exported, and writes each entry's weights in a thread while the caller
exports the next.

Why the second: a save is mostly disk writes (gigabytes, written by the
kernel with the GIL released) and an export mostly Python (lowering, graph
building). Started as soon as an entry exists, the weights are on their way
to disk while the next entry is lowered, so the lowering costs no time
when the disk is the slower of the two. The files are the same, byte for
byte (but the data file's random version, `linnet.atomic`), as
`save_together` of the same entries in the same order writes: the layout of
the data file is decided when an entry is added (`payload.SharedData`),
not when its bytes land. Nothing is renamed into place until `finish`: an
error in the caller (a failed export) or in the writer (a full disk) leaves
the folder as it was, and the writer's error is raised as `save_together`
raises it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from linnet.errors import LinnetError
from linnet.onnx.export.payload import SharedData
from linnet.onnx.export.result import ExportedModel


def save_together(
    models: Mapping[str, ExportedModel],
    folder: str | os.PathLike[str],
    *,
    data_file: str = "weights.data",
) -> dict[str, Path]:
    """Save several exported entries as `<folder>/<name>.onnx`, their weights in one file.

    The entries of one model (`prefill` and `decode`, say) hold the same
    weights; saved one by one, each writes its own copy of them. Here every
    array is written once to one data file and each model points into it
    (`<data_file>` under a new versioned name each save: `weights.<version>.data`,
    see `linnet.atomic`), when the entries were exported from the same arrays (weights opened
    once, e.g. `linnet.weights.safetensors.read_safetensors`, and passed to
    each `export_model`); a weight only one entry holds is written for it
    alone. An entry whose weights are already in its message (`.model` was
    used) is saved as `save` would. Returns the path of each model file.
    `SavingTogether` writes the same files while the entries are exported.
    """
    if not models:
        raise LinnetError("save_together needs at least one exported entry")
    saving = SavingTogether(folder, data_file=data_file, background=False)
    try:
        for name, exported in models.items():
            saving.add(name, exported)
    except BaseException:
        saving.abort()
        raise
    return saving.finish()


class SavingTogether:
    """`save_together`, one entry at a time: a context manager (see the module docstring).

        with SavingTogether(folder) as saving:
            saving.add("decode", export_model(source, ..., entry="decode"))
            saving.add("prefill", export_model(source, ..., entry="prefill"))
        saving.paths  # {"decode": folder/decode.onnx, "prefill": folder/prefill.onnx}

    Each `add` starts writing that entry's weights (those no earlier entry
    holds) in a thread; leaving the block waits for them and renames the
    models in (`finish`); an exception in the block drops everything
    (`abort`). Add the entry that is quickest to export first: the others
    are then exported while its weights are written. An added entry's arrays
    must not change, nor its `.model` be used, before `finish`.
    `background=False` writes everything in `finish`, in the caller's thread.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        data_file: str = "weights.data",
        background: bool = True,
    ) -> None:
        target = Path(folder)
        if not target.is_dir():
            raise LinnetError(f"cannot save the entries into `{target}`: not a folder")
        if "/" in data_file or data_file in ("", ".", ".."):
            raise LinnetError(f"data_file `{data_file}` must be a file name, not a path")
        self.folder = target
        self.paths: dict[str, Path] = {}
        self._data_path = target / data_file
        self._background = background
        self._shared: SharedData | None = None
        self._whole: list[tuple[ExportedModel, Path]] = []
        self._closed = False

    def add(self, name: str, exported: ExportedModel) -> None:
        """Save `exported` as `<folder>/<name>.onnx`; its weights start going to the data file."""
        if self._closed:
            raise LinnetError(f"cannot add `{name}`: the entries were already saved")
        if name in self.paths:
            raise LinnetError(f"two entries are named `{name}`")
        path = self.folder / f"{name}.onnx"
        if exported._payload:
            if self._shared is None:
                self._shared = SharedData(self._data_path, background=self._background)
            self._shared.add(exported._model, exported._payload, path)
        else:
            self._whole.append((exported, path))
        self.paths[name] = path

    def finish(self) -> dict[str, Path]:
        """Wait for the weights, write the models; the path of each model file."""
        if self._closed:
            return self.paths
        self._closed = True
        if not self.paths:
            raise LinnetError("save_together needs at least one exported entry")
        if self._shared is not None:
            self._shared.finish()
        for exported, path in self._whole:
            exported.save(path)
        return self.paths

    def abort(self) -> None:
        """Stop the writer and remove what it wrote; no model file is written."""
        if not self._closed and self._shared is not None:
            self._shared.abort()
        self._closed = True

    def __enter__(self) -> SavingTogether:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.finish()
        else:
            self.abort()
