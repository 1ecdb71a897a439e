"""Progress bars (`linnet.progress`): drawn on a terminal, silent otherwise or with LINNET_PROGRESS=0.

The policy is checked directly, then the bars of the long steps are shown
by forcing them on (`LINNET_PROGRESS=1`, no start delay) around a SafeTensors
write, an export with its external-data save and a weight binding, whose
results must not change.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from linnet import progress
from linnet.progress import Progress, enabled, track

pytest.importorskip("tqdm")

SOURCE = """module m
pub block Scale<H: Dim> {
    param gain: Tensor[H; f32]
    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
        return x * gain
    }
}"""


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.delenv(progress.ENV, raising=False)
    assert not enabled()  # pytest's captured stderr is no terminal
    monkeypatch.setattr(sys, "stderr", terminal)
    assert enabled()
    monkeypatch.setenv(progress.ENV, "0")
    assert not enabled()
    with Progress("quiet", 3) as bar:
        assert not bar.active
    assert terminal.text == ""
    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(sys, "stderr", _Plain())
    assert enabled()


class _Plain:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_silent_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(track(range(5), "counting")) == [0, 1, 2, 3, 4]
    with Progress("bytes", 100, "B") as bar:
        bar.update(100)
    assert capsys.readouterr().err == ""


def test_the_long_steps_draw_bars(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from linnet.onnx.export.api import export_model
    from linnet.onnx.export.payload import INLINE_LIMIT
    from linnet.sourcegen.weights import StoredTensor, write_safetensors
    from linnet.weights.safetensors import read_safetensors

    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    h = INLINE_LIMIT // 4 + 1  # big enough to be written to the external data file
    gain = np.linspace(0.0, 1.0, h, dtype=np.float32)
    write_safetensors(tmp_path / "w.safetensors", [StoredTensor("gain", "f32", (h,), gain)])
    written = capsys.readouterr().err
    assert "writing w.safetensors" in written
    weights = read_safetensors(tmp_path / "w.safetensors")
    exported = export_model(SOURCE, generics={"H": h, "B": 2}, weights=weights)
    exported.save(tmp_path / "m.onnx", external_data=True)
    shown = capsys.readouterr().err
    assert "reading weights" in shown and "exporting `forward`" in shown
    assert "writing m.onnx.data" in shown
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    x = np.ones((2, h), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * gain)
