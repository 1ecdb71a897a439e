"""`linnet.torch.export_linnet`: torch modules captured with torch.export, imported back.

Each imported source runs on `linnet.torch`, bound to the weights the import
wrote (under the module's own state_dict paths), and must equal the module in
eager PyTorch (the independent reference) to 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import linnet.torch as lt
from linnet.errors import LinnetError
from linnet.sourcegen.finish import ImportResult
from linnet.sourcegen.refusals import ImportRefusedError
from linnet.weights import read_safetensors

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "stdlib"


def imported(
    module: torch.nn.Module, inputs: tuple[Any, ...], folder: Path, **kw: Any
) -> ImportResult:
    return lt.export_linnet(
        module.eval(), inputs, output=folder / "model.linnet", weights=folder / "weights", **kw
    )


def run(result: ImportResult, inputs: tuple[Any, ...]) -> torch.Tensor:
    assert result.weights is not None
    module = lt.load(result.output, weights=result.weights,
                     bindings=result.weights.parent / "bindings.json", std_root=STDLIB)  # fmt: skip
    with torch.no_grad():
        out = module.run_entry(result.entry, list(inputs))
    assert isinstance(out, torch.Tensor)
    return out


def check(module: torch.nn.Module, inputs: tuple[Any, ...], result: ImportResult) -> None:
    """Equal to the module (1e-5), and every parameter bound from its state_dict path."""
    with torch.no_grad():
        expected = module(*inputs)
    torch.testing.assert_close(run(result, inputs), expected, rtol=1e-5, atol=1e-5)
    state = module.state_dict()
    assert result.parameters, "no parameters"
    for path, stored in result.parameters.items():
        # A path that is a Linnet keyword (`self`) is bound through bindings.json.
        assert stored in state and (path == stored or result.bindings[path] == stored), path
    assert result.weights is not None
    saved = read_safetensors(result.weights)
    for stored in result.parameters.values():
        torch.testing.assert_close(torch.from_numpy(saved[stored].copy()), state[stored])


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.norm(self.fc1(x)))
        return torch.softmax(self.fc2(h), dim=-1)


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
        return self.head(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def test_mlp_imports_with_std_calls(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, x = MLP().eval(), torch.randn(3, 8)
    result = imported(module, (x,), tmp_path)
    for call in ("layer_norm(", "gelu_erf(", "softmax(", "fc1.forward("):
        assert call in result.source, call
    assert "sub fc1: StdLinear<8, 16, f32>" in result.source
    check(module, (x,), result)


def test_cnn_imports_and_matches(tmp_path: Path) -> None:
    torch.manual_seed(1)
    module, x = CNN().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        module.bn1.running_mean.normal_()
        module.bn1.running_var.uniform_(0.5, 2.0)
    result = imported(module, (x,), tmp_path)
    for call in ("conv2d<", "batch_norm(", "max_pool2d<", "global_average_pool2d("):
        assert call in result.source, call
    check(module, (x,), result)
    assert "bn1.running_mean" in result.parameters  # buffers keep their state_dict paths


class _Custom(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(x).real + torch.cumprod(x, dim=0)


def test_unmapped_ops_refused_at_once_with_source_lines(tmp_path: Path) -> None:
    with pytest.raises(ImportRefusedError) as err:
        imported(_Custom(), (torch.randn(4),), tmp_path)
    text = str(err.value)
    assert "cumprod" in text and "fft" in text, text
    assert "test_export_linnet.py:" in text, text
    assert not (tmp_path / "model.linnet").exists() and not (tmp_path / "weights").exists()


def test_bad_dynamic_spec_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="dynamic"):
        imported(MLP(), (torch.randn(3, 8),), tmp_path, dynamic=[{0: "n"}, {0: "m"}])


def test_dynamic_dims_become_generics(tmp_path: Path) -> None:
    torch.manual_seed(2)
    module = CNN().eval()
    x = torch.randn(2, 3, 16, 16)
    result = imported(module, (x,), tmp_path, dynamic=[{0: "batch"}])
    assert "forward<batch: Dim>(x: Tensor[batch, 3, 16, 16; f32])" in result.source
    for n in (1, 3):
        other = torch.randn(n, 3, 16, 16)
        with torch.no_grad():
            expected = module(other)
        torch.testing.assert_close(run(result, (other,)), expected, rtol=1e-5, atol=1e-5)


class _Positions(torch.nn.Module):
    """RoBERTa-style positions (`cumsum` of `ids != pad`), a `gather` and an `argmax`."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(12, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        keep = ids.ne(1).int()
        positions = torch.cumsum(keep, dim=1) * keep + 1
        rows = self.table(positions)
        picked = torch.gather(rows, 2, (ids % 4).unsqueeze(-1).expand(-1, -1, 2))
        return picked + torch.argmax(rows, dim=-1, keepdim=True).float()


def test_cumsum_ne_gather_argmax(tmp_path: Path) -> None:
    torch.manual_seed(3)
    module = _Positions().eval()
    ids = torch.tensor([[3, 5, 1, 1], [7, 2, 9, 1]])
    result = imported(module, (ids,), tmp_path)
    check(module, (ids,), result)


def test_nested_sequentials_get_member_names(tmp_path: Path) -> None:
    """`Sequential(Sequential(conv, bn, relu), ...)`: paths `0.0.weight` bind as they are."""
    torch.manual_seed(4)
    nn = torch.nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU())  # fmt: skip

    module = nn.Sequential(block(3, 4), block(4, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                           nn.Linear(8, 3)).eval()  # fmt: skip
    x = torch.randn(2, 3, 8, 8)
    result = imported(module, (x,), tmp_path)
    check(module, (x,), result)
    assert result.bindings["item_0.item_0.weight"] == "0.0.weight", result.bindings


class _DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].sum() + torch.nonzero(x).shape[0]


def test_data_dependent_shapes_are_refused_with_their_lines(tmp_path: Path) -> None:
    with pytest.raises(ImportRefusedError) as err:
        imported(_DataDependent(), (torch.randn(5),), tmp_path)
    text = str(err.value)
    assert "data-dependent" in text and "nonzero" in text, text
    assert text.count("test_export_linnet.py:") == 2, text
    assert not (tmp_path / "model.linnet").exists()


class _Trimmed(torch.nn.Module):
    """Slice bounds and a reshape target computed from a dynamic extent."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        return (x[:, 1 : n - 1] * 2).reshape(x.shape[0] * (n - 2))


def test_sizes_computed_from_dynamic_dims(tmp_path: Path) -> None:
    n = torch.export.Dim("N", min=4, max=64)
    module = _Trimmed()
    result = imported(module, (torch.randn(2, 6),), tmp_path, dynamic=[{0: "B", 1: n}])
    assert "N >= 4" in result.source and "N <= 64" in result.source, result.source
    assert "x[:, 1:N - 1]" in result.source, result.source
    for shape in ((3, 5), (1, 9)):
        x = torch.randn(*shape)
        torch.testing.assert_close(run(result, (x,)), module(x))


class _Squared(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        return x + torch.arange(n**2).reshape(n, n)[0]


def test_a_size_no_translation_can_build_is_refused_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(ImportRefusedError) as err:
        imported(_Squared(), (torch.randn(2, 6),), tmp_path, dynamic=[{1: "N"}])
    text = str(err.value)
    assert "`arange`" in text and "test_export_linnet.py:" in text, text
    assert "not a sum or product of dynamic dims" in text, text
    assert not (tmp_path / "model.linnet").exists()
