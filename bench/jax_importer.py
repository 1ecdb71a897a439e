"""Benchmark: `linnet.jax.export_linnet` on a corpus of JAX functions.

The corpus: plain `jax.numpy` functions (MLPs with parameter dicts, norms,
softmax over any axis, attention with a causal mask, `vmap`, lookups, running
sums, argmax, convolutions, `scan` and `fori_loop` (512 steps too), sorting,
top-k and `.at[]` updates), Flax NNX modules, and functions the importer
refuses (a `while_loop` whose condition depends on the data, a sort by two
keys). For each:

- import: `export_linnet(fn, params, inputs, output=..., weights=DIR)`
  (jax.export, translation, formatting, the checker, source and weights);
- match: the imported source run on `linnet.torch`, bound to the weights the
  import wrote, against `jax.jit(fn)` (max abs difference <= 1e-5);
- refused: the importer's error, the ops it names;
- time: the whole import against `jax.export` alone on the same function.

Prints one row per function and a summary (markdown).

    .venv/bin/python bench/jax_importer.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

Case = tuple[Callable[..., Any], Any, tuple[np.ndarray, ...]]
RNG = np.random.default_rng(0)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _layer_norm(x: Any, g: Any, b: Any) -> Any:
    d = x - x.mean(-1, keepdims=True)
    return d / jnp.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g + b


def _rms_norm(x: Any, g: Any) -> Any:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def _attention(q: Any, k: Any, v: Any) -> Any:
    s = q.shape[-2]
    scores = jnp.einsum("...qd,...kd->...qk", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    mask = jnp.tril(jnp.ones((s, s), bool))
    return jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ v


def _plain_cases() -> dict[str, Callable[[], Case]]:
    def mlp() -> Case:
        p = {"layers": [{"w": normal(16, 16), "b": normal(16)} for _ in range(3)]}

        def fn(p: Any, x: Any) -> Any:
            for layer in p["layers"]:
                x = jax.nn.gelu(x @ layer["w"] + layer["b"])
            return jax.nn.softmax(x)

        return fn, p, (normal(4, 16),)

    def norms() -> Case:
        p = {"ln": {"g": normal(8), "b": normal(8)}, "rms": normal(8)}
        return (
            lambda p, x: _rms_norm(_layer_norm(x, p["ln"]["g"], p["ln"]["b"]), p["rms"]),
            p,
            (normal(2, 3, 8),),
        )

    def softmax_axes() -> Case:
        return (
            lambda p, x: (jax.nn.softmax(x, axis=0), jax.nn.softmax(x, axis=1)),
            {},
            (normal(3, 4, 5),),
        )

    def activations() -> Case:
        def fn(p: Any, x: Any) -> Any:
            return jax.nn.silu(x) + jax.nn.sigmoid(x) * jax.nn.gelu(x, approximate=False)

        return fn, {}, (normal(4, 6),)

    def causal_attention() -> Case:
        p = {n: normal(8, 8) for n in ("q", "k", "v", "o")}

        def fn(p: Any, x: Any) -> Any:
            b, s, _ = x.shape
            heads = [(x @ p[n]).reshape(b, s, 2, 4).transpose(0, 2, 1, 3) for n in "qkv"]
            out = _attention(*heads).transpose(0, 2, 1, 3).reshape(b, s, 8)
            return out @ p["o"]

        return fn, p, (normal(2, 5, 8),)

    def vmapped() -> Case:
        p = {"w": normal(6, 3), "b": normal(3)}
        return (
            lambda p, x: jax.vmap(lambda row: jnp.tanh(row @ p["w"] + p["b"]))(x),
            p,
            (normal(7, 6),),
        )

    def lookup_pool() -> Case:
        p = {"table": normal(20, 8)}
        ids = RNG.integers(0, 20, (3, 5)).astype(np.int32)
        return (lambda p, i: p["table"][i].mean(axis=1), p, (ids,))

    def running_sum() -> Case:
        return (lambda p, x: jnp.cumsum(x, axis=1) - jnp.max(x, axis=0), {}, (normal(4, 6),))

    def conv() -> Case:
        def fn(p: Any, x: Any) -> Any:
            return lax.conv_general_dilated(x, p["k"], (1, 1), "SAME")

        return fn, {"k": normal(4, 3, 3, 3)}, (normal(1, 3, 8, 8),)

    def argmax() -> Case:
        return (lambda p, x: (jnp.argmax(x, axis=-1), jnp.argmin(x, axis=0)), {}, (normal(3, 5),))

    def scan() -> Case:
        p = {"w": normal(4)}
        return (
            lambda p, x: lax.scan(lambda c, r: (c * p["w"] + r, c), jnp.zeros(4), x),
            p,
            (normal(5, 4),),
        )

    def scan_unrolled() -> Case:
        p = {"w": normal(4)}

        def fn(p: Any, x: Any) -> Any:
            step = lambda c, r: (jnp.tanh(c * p["w"] + r), c)  # noqa: E731
            return lax.scan(step, jnp.zeros(4), x, unroll=True)

        return fn, p, (normal(5, 4),)

    def fori_unrolled() -> Case:
        return (
            lambda p, x: lax.fori_loop(0, 4, lambda i, c: c * p["a"] + 1.0, x, unroll=True),
            {"a": normal(3)},
            (normal(2, 3),),
        )

    def scan_long() -> Case:
        p = {"decay": normal(8) * 0.1 + 0.5}

        def fn(p: Any, xs: Any) -> Any:
            step = lambda c, x: (c * p["decay"] + x * (1.0 - p["decay"]),) * 2  # noqa: E731
            return lax.scan(step, jnp.zeros(8), xs)

        return fn, p, (normal(512, 8),)

    def fori() -> Case:
        return (
            lambda p, x: lax.fori_loop(0, 4, lambda i, c: c * p["a"] + 1.0, x),
            {"a": normal(3)},
            (normal(2, 3),),
        )

    def sort() -> Case:
        return (lambda p, x: (jnp.sort(x, axis=-1), jnp.argsort(x, axis=0)), {}, (normal(3, 5),))

    def top_k() -> Case:
        return (lambda p, x: lax.top_k(x, 2), {}, (normal(3, 5),))

    def scatter() -> Case:
        return (
            lambda p, x: x.at[jnp.array([0, 2, 0])].add(p["w"]).at[1].set(p["w"]),
            {"w": normal(5)},
            (normal(3, 5),),
        )

    return {
        "mlp": mlp,
        "layer+rms norm": norms,
        "softmax axes": softmax_axes,
        "activations": activations,
        "causal attention": causal_attention,
        "vmap": vmapped,
        "lookup+mean": lookup_pool,
        "cumsum": running_sum,
        "argmax/argmin": argmax,
        "conv": conv,
        "scan": scan,
        "scan unroll": scan_unrolled,
        "fori unroll": fori_unrolled,
        "scan 512": scan_long,
        "fori": fori,
        "sort": sort,
        "top_k": top_k,
        "scatter": scatter,
    }


def _refused_cases() -> dict[str, Callable[[], Case]]:
    def while_loop() -> Case:
        return (
            lambda p, x: lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c * 2.0, x),
            {},
            (np.abs(normal(3)) + 1.0,),
        )

    def lexsort() -> Case:
        return (lambda p, x: lax.sort((x, x * 2.0), num_keys=2)[0], {}, (normal(3, 5),))

    return {"while_loop": while_loop, "lexsort": lexsort}


def _flax_cases() -> dict[str, Callable[[], Case]]:
    try:
        from flax import nnx
    except ImportError:
        return {}

    class Mlp(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.fc1 = nnx.Linear(8, 16, rngs=rngs)
            self.fc2 = nnx.Linear(16, 4, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.fc2(nnx.gelu(self.fc1(x)))

    class Block(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.norm1 = nnx.LayerNorm(8, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(num_heads=2, in_features=8, decode=False, rngs=rngs)
            self.norm2 = nnx.RMSNorm(8, rngs=rngs)
            self.up = nnx.Linear(8, 16, rngs=rngs)
            self.down = nnx.Linear(16, 8, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            mask = nnx.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + self.attn(self.norm1(x), mask=mask)
            return x + self.down(nnx.silu(self.up(self.norm2(x))))

    def case(make: Callable[[], Any], x: np.ndarray) -> Callable[[], Case]:
        def build() -> Case:
            graphdef, state = nnx.split(make())
            return (lambda p, x: nnx.merge(graphdef, p)(x)), state, (x,)

        return build

    return {
        "nnx mlp": case(lambda: Mlp(nnx.Rngs(0)), normal(2, 8)),
        "nnx transformer block": case(lambda: Block(nnx.Rngs(1)), normal(2, 5, 8)),
    }


def corpus() -> dict[str, Callable[[], Case]]:
    return {**_plain_cases(), **_flax_cases(), **_refused_cases()}


def run_one(name: str, build: Callable[[], Case], folder: Path) -> dict[str, Any]:
    import torch

    import linnet.torch as lt
    from linnet.errors import LinnetError
    from linnet.jax import export_linnet

    fn, params, inputs = build()
    row: dict[str, Any] = {"name": name, "imported": False, "match": False, "error": ""}
    start = time.perf_counter()
    jax.export.export(jax.jit(fn))(params, *inputs)
    row["export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    try:
        result = export_linnet(fn, params, inputs, output=folder / "m.linnet", weights=folder / "w")
    except LinnetError as exc:
        row["error"] = str(exc).splitlines()[0]
        return row
    row["import_s"] = time.perf_counter() - start
    row["imported"] = True
    row["recovered"] = sorted({n.split("`")[1] for n in result.notes if n.startswith("recovered")})
    assert result.weights is not None
    module = lt.load(
        result.output,
        weights=result.weights,
        bindings=result.weights.parent / "bindings.json",
        std_root=ROOT / "stdlib",
    )
    with torch.no_grad():
        got = module.run_entry(result.entry, [torch.from_numpy(np.asarray(x)) for x in inputs])
    got_list = list(got) if isinstance(got, tuple | list) else [got]
    want = jax.jit(fn)(params, *inputs)
    want_list = list(want) if isinstance(want, tuple | list) else [want]
    err = max(
        float(np.max(np.abs(g.numpy() - np.asarray(w))))
        for g, w in zip(got_list, want_list, strict=True)
    )
    row["max_err"] = err
    row["match"] = err <= 1e-5
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run only these functions")
    args = parser.parse_args()
    cases = corpus()
    names = args.only or list(cases)
    rows = []
    print("| function | result | max err | recovered / refused | jax.export s | import s |")
    print("|---|---|---|---|---|---|")
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            row = run_one(name, cases[name], Path(tmp))
        rows.append(row)
        result = "match" if row["match"] else ("MISMATCH" if row["imported"] else "refused")
        detail = ", ".join(row.get("recovered", [])) if row["imported"] else row["error"][:90]
        err = f"{row['max_err']:.1e}" if "max_err" in row else ""
        took = f"{row['import_s']:.2f}" if "import_s" in row else ""
        print(
            f"| {name} | {result} | {err} | {detail} | {row['export_s']:.2f} | {took} |", flush=True
        )
    imported = sum(r["imported"] for r in rows)
    matched = sum(r["match"] for r in rows)
    print("\n| functions | imported | match | refused |\n|---|---|---|---|")
    print(f"| {len(rows)} | {imported} | {matched} | {len(rows) - imported} |")


if __name__ == "__main__":
    main()
