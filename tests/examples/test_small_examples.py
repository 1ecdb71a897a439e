"""examples/01-linear, 02-attention and 03-tiny-transformer against independent references.

Each example's own `make_weights.py` writes its SafeTensors file; the Linnet
model binds it by path through `linnet.torch.load` (interpreted and generated
source), and the same file goes into the reference with `load_state_dict(strict=True)`,
which also proves the parameter paths are the reference's `state_dict` names.

- 01-linear: `torch.nn.Linear` and NumPy f64, with and without the optional bias,
  for inputs with zero, one and two leading axes.
- 02-attention: `torch.nn.MultiheadAttention` (packed `in_proj_weight`) and a
  NumPy f64 attention, without and with a causal mask.
- 03-tiny-transformer: a hand-written PyTorch module run in f64 (RMS norm, rotary
  attention, SwiGLU), the `rope_tables` module-level entry against NumPy f64,
  and causality (later tokens never change earlier logits).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from vision_support import (  # noqa: E402
    COMPILE,
    EXAMPLES,
    assert_close,
    example_script,
    read_weights,
)

import linnet.torch as lt  # noqa: E402

F32 = 1e-5  # an f32 result against an f32 or f64 reference of a shallow computation


def tensors(arrays: dict[str, np.ndarray], dtype: torch.dtype = torch.float32) -> dict:
    return {name: torch.from_numpy(a).to(dtype) for name, a in arrays.items()}


# -- 01-linear ------------------------------------------------------------------------------

LINEAR = EXAMPLES / "01-linear" / "src" / "lib.linnet"
IN, OUT = 8, 4


@pytest.fixture(scope="module", params=[True, False], ids=["bias", "no-bias"])
def linear_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("linear")
    path: Path = example_script("01-linear").make_weights(
        folder, features_in=IN, features_out=OUT, bias=request.param, seed=1
    )
    return path


@pytest.mark.parametrize("compile", COMPILE, ids=["interpreted", "generated"])
def test_linear_matches_torch_and_numpy(linear_file: Path, compile: bool) -> None:
    arrays = read_weights(linear_file)
    has_bias = "bias" in arrays
    model = lt.load(LINEAR, generics={"In": IN, "Out": OUT}, weights=linear_file, compile=compile)
    reference = nn.Linear(IN, OUT, bias=has_bias)
    reference.load_state_dict(tensors(arrays), strict=True)
    assert sorted(model.state_dict()) == sorted(reference.state_dict())
    rng = np.random.default_rng(2)
    for shape in [(IN,), (5, IN), (2, 3, IN)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = model(torch.from_numpy(x)).detach()
        with torch.no_grad():
            assert_close(got, reference(torch.from_numpy(x)), F32, f"nn.Linear {shape}")
        exact = x.astype(np.float64) @ arrays["weight"].astype(np.float64).T
        if has_bias:
            exact = exact + arrays["bias"]
        assert_close(got, exact, F32, f"NumPy f64 {shape}")


# -- 02-attention ---------------------------------------------------------------------------

ATTENTION = EXAMPLES / "02-attention" / "src" / "lib.linnet"
H, HEADS = 16, 4


@pytest.fixture(scope="module")
def attention_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = example_script("02-attention").make_weights(
        tmp_path_factory.mktemp("attention"), hidden=H, heads=HEADS, seed=3
    )
    return path


def attention_f64(x: np.ndarray, w: dict[str, np.ndarray], causal: bool) -> np.ndarray:
    """Multi-head self-attention in NumPy f64 (`[B, S, H]` in and out)."""
    b, s, h = x.shape
    d = h // HEADS
    packed = x @ w["in_proj_weight"].T + w["in_proj_bias"]

    def heads(part: np.ndarray) -> np.ndarray:
        return part.reshape(b, s, HEADS, d).transpose(0, 2, 1, 3)

    q, k, v = (heads(packed[..., i * h : (i + 1) * h]) for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    merged = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    out: np.ndarray = merged @ w["out_proj.weight"].T + w["out_proj.bias"]
    return out


@pytest.mark.parametrize("compile", COMPILE, ids=["interpreted", "generated"])
def test_attention_matches_multihead_attention_and_numpy(
    attention_file: Path, compile: bool
) -> None:
    arrays = read_weights(attention_file)
    model = lt.load(
        ATTENTION, generics={"H": H, "Heads": HEADS}, weights=attention_file, compile=compile
    )
    reference = nn.MultiheadAttention(H, HEADS, batch_first=True).eval()
    reference.load_state_dict(tensors(arrays), strict=True)
    f64 = {name: a.astype(np.float64) for name, a in arrays.items()}
    rng = np.random.default_rng(4)
    for batch, seq in [(2, 5), (1, 3)]:
        x = rng.standard_normal((batch, seq, H)).astype(np.float32)
        xt = torch.from_numpy(x)
        blocked = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        with torch.no_grad():
            full, _ = reference(xt, xt, xt, need_weights=False)
            causal, _ = reference(xt, xt, xt, need_weights=False, attn_mask=blocked)
        got_full = model(xt).detach()
        got_causal = model.run_entry("causal", [xt]).detach()
        assert_close(got_full, full, F32, f"forward {batch}x{seq} vs nn.MultiheadAttention")
        assert_close(got_causal, causal, F32, f"causal {batch}x{seq} vs nn.MultiheadAttention")
        x64 = x.astype(np.float64)
        assert_close(got_full, attention_f64(x64, f64, False), F32, "forward vs NumPy f64")
        assert_close(got_causal, attention_f64(x64, f64, True), F32, "causal vs NumPy f64")
        # The mask matters: the first position sees only itself in the causal entry.
        assert not np.allclose(got_full.numpy()[:, 0], got_causal.numpy()[:, 0], atol=1e-3)


# -- 03-tiny-transformer --------------------------------------------------------------------

TINY = EXAMPLES / "03-tiny-transformer" / "src" / "lib.linnet"
TINY_GENERICS = {"Vocab": 40, "H": 32, "Heads": 4, "Inner": 48, "Layers": 2}
THETA = 10000.0
TINY_TOLERANCE = 1e-4  # f32 through two layers against f64


def rope_tables_f64(seq: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    freq = THETA ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.arange(seq, dtype=np.float64)[:, None] * freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


class RmsNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        def rotate(t: torch.Tensor) -> torch.Tensor:
            half = torch.cat([-t[..., d // 2 :], t[..., : d // 2]], dim=-1)
            return t * cos + half * sin

        q, k, v = rotate(split(self.q(x))), rotate(split(self.k(x))), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.o((weights @ v).transpose(1, 2).reshape(b, s, h))


class SwiGlu(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int) -> None:
        super().__init__()
        self.attn_norm = RmsNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.mlp_norm = RmsNorm(hidden)
        self.mlp = SwiGlu(hidden, inner)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class TinyTransformer(nn.Module):
    """The reference: the same architecture written directly in PyTorch."""

    def __init__(self, vocab: int, hidden: int, heads: int, inner: int, layers: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, inner) for _ in range(layers))
        self.norm = RmsNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cos, sin = (torch.from_numpy(t) for t in rope_tables_f64(ids.shape[1], self.head_dim))
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits: torch.Tensor = self.head(self.norm(h))
        return logits


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = example_script("03-tiny-transformer").make_weights(
        tmp_path_factory.mktemp("tiny"), seed=5, **TINY_GENERICS
    )
    return path


@pytest.fixture(scope="module")
def tiny_reference(tiny_file: Path) -> TinyTransformer:
    g = TINY_GENERICS
    reference = TinyTransformer(g["Vocab"], g["H"], g["Heads"], g["Inner"], g["Layers"])
    reference.load_state_dict(tensors(read_weights(tiny_file)), strict=True)
    return reference.double().eval()


@pytest.mark.parametrize("compile", COMPILE, ids=["interpreted", "generated"])
def test_tiny_transformer_matches_pytorch_f64(
    tiny_file: Path, tiny_reference: TinyTransformer, compile: bool
) -> None:
    model = lt.load(TINY, generics=TINY_GENERICS, weights=tiny_file, compile=compile)
    assert sorted(model.state_dict()) == sorted(tiny_reference.state_dict())
    generator = torch.Generator().manual_seed(6)
    for batch, seq in [(2, 7), (1, 3)]:
        ids = torch.randint(0, TINY_GENERICS["Vocab"], (batch, seq), generator=generator)
        got = model(ids.to(torch.int32)).detach()
        with torch.no_grad():
            expected = tiny_reference(ids)
        assert got.dtype == torch.float32
        assert_close(got, expected, TINY_TOLERANCE, f"logits {batch}x{seq}")
        assert float(expected.std()) > 0.1  # the comparison is not between near-zero values


def test_tiny_transformer_is_causal(tiny_file: Path) -> None:
    model = lt.load(TINY, generics=TINY_GENERICS, weights=tiny_file, compile=True)
    ids = torch.tensor([[3, 14, 15, 9, 26, 5]], dtype=torch.int32)
    changed = ids.clone()
    changed[0, -1] = 35
    before, after = model(ids).detach(), model(changed).detach()
    assert_close(after[:, :-1], before[:, :-1], 1e-6, "logits before the changed token")
    assert not torch.allclose(after[:, -1], before[:, -1], atol=1e-3)


def test_rope_tables_entry_matches_numpy() -> None:
    tables = lt.load_function(TINY, "rope_tables")
    seq, dim = 9, 8
    cos, sin = tables.call([THETA], generics={"S": seq, "D": dim})
    expected_cos, expected_sin = rope_tables_f64(seq, dim)
    assert_close(cos, expected_cos, 1e-5, "cos table")
    assert_close(sin, expected_sin, 1e-5, "sin table")
