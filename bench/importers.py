"""Benchmark: `linnet.torch.export_linnet` on a corpus of `torch.nn` models.

The corpus: transformers architectures with small random configs, CNNs written
here in the style of torchvision's (LeNet, VGG, ResNet blocks, MobileNet's
depthwise separable blocks), and common layers alone. For each model:

- import: `export_linnet(model, inputs, output=..., weights=DIR)` (torch.export,
  translation, formatting, the checker, source and weights written);
- match: the imported source run on `linnet.torch`, bound to the weights the
  import wrote, against the model in eager PyTorch (max abs difference <= 1e-5
  relative to the output's scale);
- refused: the importer's error, its first line (every refused node is in it);
- time: the whole import against `torch.export.export` alone on the same
  model and inputs (the translation's own cost is the difference).

Prints one row per model and a summary table (markdown).

`--tinyllama` instead times one transformers `LlamaForCausalLM` of TinyLlama-1.1B
shapes (22 layers, H=2048, 32 heads, 4 KV heads, inner 5632, vocabulary 32000,
f32: 4.4 GB of random weights, built on the meta device and then allocated), each
step in a process of its own so that time and peak memory (the child's maximum
resident set) are its alone: `torch.export` alone; `export_linnet` without
`weights=` (capture plus translation: the translation's cost is the difference);
`export_linnet` with `weights=` under `--tmp` (the SafeTensors written, then
deleted). Aims: translation adds under 1 s to `torch.export`, and the import's
peak stays under 1.2x the weight bytes. `--profile N` prints the N costliest
functions of the import (cProfile, cumulative).

    .venv/bin/python bench/importers.py [--only NAME ...] [--llama-width H --llama-layers N]
    .venv/bin/python bench/importers.py --tinyllama [--layers 22] [--tmp /tmp] [--profile 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

Case = tuple[torch.nn.Module, tuple[torch.Tensor, ...]]


class Output(torch.nn.Module):
    """`model(*inputs).<key>` holding the model's children (paths read `model.layers.0...`)."""

    def __init__(self, model: Any, key: str) -> None:
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        self._call = model.__call__
        self._key = key

    def forward(self, *inputs: torch.Tensor) -> Any:
        return getattr(self._call(*inputs), self._key)


def _ids(n: int = 50) -> torch.Tensor:
    return torch.randint(0, n, (2, 7), generator=torch.Generator().manual_seed(0))


def _pixels(size: int = 16, channels: int = 3) -> torch.Tensor:
    return torch.randn(2, channels, size, size, generator=torch.Generator().manual_seed(0))


def _decoder(kind: str, **extra: Any) -> Case:
    import transformers

    config_cls = getattr(transformers, f"{kind}Config")
    model_cls = getattr(transformers, f"{kind}ForCausalLM")
    config = config_cls(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=60,
        max_position_embeddings=64,
        use_cache=False,
        **extra,
    )
    return Output(model_cls(config), "logits"), (_ids(),)


def _transformers_cases() -> dict[str, Callable[[], Case]]:
    import transformers as tf

    def encoder(model: Any, inputs: tuple[torch.Tensor, ...]) -> Case:
        return Output(model, "last_hidden_state"), inputs

    mask = torch.ones(2, 7, dtype=torch.int64)
    mask[1, 5:] = 0
    bert = {
        "vocab_size": 60,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 32,
    }
    return {
        "llama": lambda: _decoder("Llama"),
        "qwen2": lambda: _decoder("Qwen2"),
        "qwen3": lambda: _decoder("Qwen3", head_dim=8),
        "phi3": lambda: _decoder("Phi3", pad_token_id=0),
        "mistral": lambda: _decoder("Mistral"),
        "gemma": lambda: _decoder("Gemma", head_dim=8),
        "gpt2": lambda: (
            Output(
                tf.GPT2LMHeadModel(
                    tf.GPT2Config(
                        n_layer=2,
                        n_head=4,
                        n_embd=32,
                        vocab_size=50,
                        n_positions=16,
                        use_cache=False,
                    )
                ),
                "logits",
            ),
            (_ids(),),
        ),
        "bert": lambda: encoder(tf.BertModel(tf.BertConfig(**bert)), (_ids(),)),
        "bert_mask": lambda: encoder(tf.BertModel(tf.BertConfig(**bert)), (_ids(), mask)),
        "roberta": lambda: encoder(
            tf.RobertaModel(tf.RobertaConfig(**bert, pad_token_id=1)), (_ids() + 2,)
        ),
        "distilbert": lambda: encoder(
            tf.DistilBertModel(
                tf.DistilBertConfig(
                    vocab_size=60,
                    dim=32,
                    n_layers=2,
                    n_heads=4,
                    hidden_dim=64,
                    max_position_embeddings=32,
                )
            ),
            (_ids(),),
        ),
        "vit": lambda: encoder(
            tf.ViTModel(
                tf.ViTConfig(
                    image_size=16,
                    patch_size=4,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                )
            ),
            (_pixels(),),
        ),
        "clip_text": lambda: encoder(
            tf.CLIPTextModel(
                tf.CLIPTextConfig(
                    vocab_size=60,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    max_position_embeddings=16,
                )
            ),
            (_ids(),),
        ),
        "clip_vision": lambda: encoder(
            tf.CLIPVisionModel(
                tf.CLIPVisionConfig(
                    image_size=16,
                    patch_size=4,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                )
            ),
            (_pixels(),),
        ),
    }


def _conv_bn(cin: int, cout: int, stride: int = 1, groups: int = 1) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(cin, cout, 3, stride, 1, groups=groups, bias=False),
        torch.nn.BatchNorm2d(cout),
        torch.nn.ReLU(),
    )


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet basic block with a projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.downsample(x))


def _cnn_cases() -> dict[str, Callable[[], Case]]:
    nn = torch.nn
    return {
        "lenet": lambda: (
            nn.Sequential(
                nn.Conv2d(1, 6, 5, padding=2),
                nn.Tanh(),
                nn.AvgPool2d(2),
                nn.Conv2d(6, 16, 5),
                nn.Tanh(),
                nn.AvgPool2d(2),
                nn.Flatten(),
                nn.Linear(16 * 5 * 5, 32),
                nn.Tanh(),
                nn.Linear(32, 10),
            ),
            (_pixels(28, 1),),
        ),
        "vgg_tiny": lambda: (
            nn.Sequential(
                _conv_bn(3, 8),
                _conv_bn(8, 8),
                nn.MaxPool2d(2),
                _conv_bn(8, 16),
                nn.MaxPool2d(2),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 10),
            ),
            (_pixels(),),
        ),
        "resnet_tiny": lambda: (
            nn.Sequential(
                _conv_bn(3, 8),
                BasicBlock(8, 16, 2),
                BasicBlock(16, 16, 1),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 10),
            ),
            (_pixels(),),
        ),
        "mobilenet_tiny": lambda: (
            nn.Sequential(
                _conv_bn(3, 8, 2),
                _conv_bn(8, 8, 1, groups=8),
                nn.Conv2d(8, 16, 1),
                nn.ReLU6(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 10),
            ),
            (_pixels(),),
        ),
        "conv1d_net": lambda: (
            nn.Sequential(
                nn.Conv1d(4, 8, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool1d(2),
                nn.Conv1d(8, 8, 3),
                nn.GELU(),
                nn.AdaptiveAvgPool1d(1),
                nn.Flatten(),
                nn.Linear(8, 3),
            ),
            (torch.randn(2, 4, 16),),
        ),
    }


def _layer_cases() -> dict[str, Callable[[], Case]]:
    nn = torch.nn
    x = torch.randn(2, 5, 16)
    return {
        "linear": lambda: (nn.Linear(16, 8), (x,)),
        "mlp_gelu": lambda: (nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)), (x,)),
        "mlp_silu": lambda: (nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 16)), (x,)),
        "layer_norm": lambda: (nn.LayerNorm(16), (x,)),
        "rms_norm": lambda: (nn.RMSNorm(16, eps=1e-6), (x,)),
        "embedding": lambda: (nn.Embedding(50, 16), (_ids(),)),
        "softmax": lambda: (nn.Softmax(dim=1), (x,)),
        "batch_norm1d": lambda: (nn.BatchNorm1d(5), (x,)),
        "leaky_relu": lambda: (nn.LeakyReLU(0.2), (x,)),
        "multihead_attention": lambda: (_MHA(), (x,)),
        "encoder_layer": lambda: (
            nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True),
            (x,),
        ),
        "gru": lambda: (_First(nn.GRU(16, 8, batch_first=True)), (x,)),
        "lstm": lambda: (_First(nn.LSTM(16, 8, batch_first=True)), (x,)),
        "upsample": lambda: (nn.Upsample(scale_factor=2, mode="nearest"), (_pixels(),)),
    }


class _MHA(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


class _First(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)[0]
        return out


def corpus() -> dict[str, Callable[[], Case]]:
    return {**_transformers_cases(), **_cnn_cases(), **_layer_cases()}


def _randomize(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 2.0, generator=gen)
            elif name.endswith("running_mean"):
                b.normal_(generator=gen)


def run_one(name: str, build: Callable[[], Case], folder: Path) -> dict[str, Any]:
    import linnet.torch as lt
    from linnet.errors import LinnetError

    model, inputs = build()
    model.eval()
    _randomize(model, 1)
    start = time.perf_counter()
    torch.export.export(model, inputs, strict=False)
    export_s = time.perf_counter() - start
    row: dict[str, Any] = {"model": name, "export_s": export_s}
    start = time.perf_counter()
    try:
        result = lt.export_linnet(
            model, inputs, output=folder / f"{name}.linnet", weights=folder / f"{name}-weights"
        )
    except LinnetError as exc:
        row.update(status="refused", why=str(exc).splitlines()[0][:160])
        return row
    row["import_s"] = time.perf_counter() - start
    assert result.weights is not None
    loaded = lt.load(
        result.output,
        weights=result.weights,
        bindings=result.weights.parent / "bindings.json",
        std_root=ROOT / "stdlib",
    )
    with torch.no_grad():
        expected = model(*inputs)
        actual = loaded.run_entry(result.entry, list(inputs))
    diff = float((actual - expected).abs().max())
    scale = max(1.0, float(expected.abs().max()))
    row.update(status="match" if diff <= 1e-5 * scale else "differs", diff=diff)
    return row


TINYLLAMA = {"vocab_size": 32000, "hidden_size": 2048, "num_attention_heads": 32,
             "num_key_value_heads": 4, "intermediate_size": 5632, "num_hidden_layers": 22}  # fmt: skip
TOKENS = 32


def _tinyllama(layers: int) -> Case:
    """A random TinyLlama-shaped Llama: made on the meta device (no initialisation
    pass), then allocated and filled once."""
    import transformers

    config = transformers.LlamaConfig(
        **{**TINYLLAMA, "num_hidden_layers": layers},
        max_position_embeddings=2 * TOKENS,
        rms_norm_eps=1e-5,
        use_cache=False,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model = model.to_empty(device="cpu").eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
        model.model.rotary_emb.__init__(config)  # the inverse frequencies to_empty left unset
    return Output(model, "logits"), (torch.randint(0, 32000, (1, TOKENS), generator=gen),)


def _peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def tinyllama_child(role: str, layers: int, tmp: Path, profile: int) -> dict[str, Any]:
    """One step of `--tinyllama` in this process (see the module docstring)."""
    started = time.perf_counter()
    import linnet.torch as lt
    import linnet.torch.importer.api  # noqa: F401 - loaded once per process, not timed

    imports = time.perf_counter() - started
    from linnet.torch.importer import api

    captured: list[float] = []
    plain_capture = api.capture  # type: ignore[attr-defined]

    def timed_capture(*args: Any) -> Any:  # the capture's share of the import
        begin = time.perf_counter()
        try:
            return plain_capture(*args)
        finally:
            captured.append(time.perf_counter() - begin)

    api.capture = timed_capture  # type: ignore[attr-defined,assignment]
    model, inputs = _tinyllama(layers)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    built = _peak_bytes()
    folder = Path(tempfile.mkdtemp(prefix="importers-tinyllama-", dir=tmp))
    start = time.perf_counter()
    try:
        if role == "export":
            torch.export.export(model, inputs, strict=False)
        else:
            kwargs: dict[str, Any] = {"output": folder / "model.linnet"}
            if role == "weights":
                kwargs["weights"] = folder / "weights"
            if profile:
                import cProfile
                import pstats

                with cProfile.Profile() as prof:
                    lt.export_linnet(model, inputs, **kwargs)
                stats = pstats.Stats(prof, stream=sys.stderr).sort_stats(
                    os.environ.get("BENCH_SORT", "cumulative")
                )
                stats.print_stats("linnet", profile)
            else:
                lt.export_linnet(model, inputs, **kwargs)
        seconds = time.perf_counter() - start
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return {"seconds": seconds, "peak": _peak_bytes(), "built": built, "weights": weights,
            "imports": imports, "capture": sum(captured)}  # fmt: skip


def tinyllama(layers: int, tmp: Path, profile: int) -> None:
    import json
    import os
    import subprocess

    rows: dict[str, dict[str, Any]] = {}
    for role in ("export", "translate", "weights"):
        argv = [sys.executable, __file__, "--tinyllama-child", role, "--layers", str(layers),
                "--tmp", str(tmp), "--profile", str(profile if role == "translate" else 0)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{role} failed:\n{done.stderr[-4000:]}")
        if profile and role == "translate":
            print(done.stderr)
        rows[role] = json.loads(done.stdout.strip().splitlines()[-1])
    gb = 1 << 30
    weights = rows["export"]["weights"]
    print(f"TinyLlama-shaped Llama, {layers} layers, {weights / gb:.2f} GiB of f32 weights; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print("| step | seconds | peak GiB | peak / weights | after building GiB |")
    print("| --- | --- | --- | --- | --- |")
    names = {"export": "torch.export alone", "translate": "export_linnet (no weights)",
             "weights": "export_linnet, weights written"}  # fmt: skip
    for role, row in rows.items():
        print(f"| {names[role]} | {row['seconds']:.2f} | {row['peak'] / gb:.2f} | "
              f"{row['peak'] / weights:.2f} | {row['built'] / gb:.2f} |")  # fmt: skip
    print(f"(loading linnet's importer modules, once per process and not timed above: "
          f"{rows['translate']['imports']:.2f} s)")  # fmt: skip
    extra = rows["translate"]["seconds"] - rows["translate"]["capture"]
    print(f"inside export_linnet: capture (torch.export, folding) "
          f"{rows['translate']['capture']:.2f} s, the rest {extra:.2f} s")  # fmt: skip
    print(f"translation adds {extra:.2f} s to torch.export (aim: under 1 s); import peak "
          f"{rows['weights']['peak'] / weights:.2f}x the weights (aim: under 1.2x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run only these models")
    parser.add_argument("--tinyllama", action="store_true", help="time a TinyLlama-shaped import")
    parser.add_argument("--tinyllama-child", choices=["export", "translate", "weights"],
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--layers", type=int, default=22, help="--tinyllama: decoder layers")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()),
                        help="--tinyllama: where the weights are written (then deleted)")  # fmt: skip
    parser.add_argument("--profile", type=int, default=0,
                        help="--tinyllama: print this many costliest functions of the import")  # fmt: skip
    parser.add_argument(
        "--llama-width",
        type=int,
        default=0,
        help="also time one Llama of this hidden size (translation cost)",
    )
    parser.add_argument("--llama-layers", type=int, default=4)
    args = parser.parse_args()
    if args.tinyllama_child:
        import json

        row = tinyllama_child(args.tinyllama_child, args.layers, args.tmp, args.profile)
        print(json.dumps(row))
        return
    if args.tinyllama:
        tinyllama(args.layers, args.tmp, args.profile)
        return
    cases = corpus()
    if args.llama_width:
        h = args.llama_width
        cases["llama_wide"] = lambda: _decoder_wide(h, args.llama_layers)
    names = args.only or list(cases)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = run_one(name, cases[name], Path(tmp))
            rows.append(row)
            print(_line(row), flush=True)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("match", "differs", "refused")}
    imported = [r for r in rows if "import_s" in r]
    print()
    print("| models | imported | match | differ | refused | import s (sum) | export s (sum) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| {len(rows)} | {len(imported)} | {counts['match']} | {counts['differs']} | "
        f"{counts['refused']} | {sum(r['import_s'] for r in imported):.1f} | "
        f"{sum(r['export_s'] for r in imported):.1f} |"
    )


def _decoder_wide(h: int, layers: int) -> Case:
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=h,
        intermediate_size=h * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=max(4, h // 64),
        num_key_value_heads=max(1, h // 512),
        vocab_size=32000,
        max_position_embeddings=256,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config)
    return Output(model, "logits"), (torch.randint(0, 32000, (1, 32)),)


def _line(row: dict[str, Any]) -> str:
    if row["status"] == "refused":
        return f"{row['model']:<20} refused  export {row['export_s']:.2f}s  {row['why']}"
    return (
        f"{row['model']:<20} {row['status']:<8} export {row['export_s']:.2f}s  "
        f"import {row['import_s']:.2f}s  max diff {row['diff']:.2e}"
    )


if __name__ == "__main__":
    main()
