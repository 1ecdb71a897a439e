"""Benchmark: `linnet.hf.export`, `linnet.gguf.export` and `linnet.convert` at TinyLlama shape.

A Llama with TinyLlama-1.1B shapes (22 layers, H=2048, 32 heads, 4 KV heads,
inner 5632, vocabulary 32000, f32, seeded random weights) is written once as a
transformers folder (`config.json` + `model.safetensors`, kept in `--keep DIR`
and reused). Then, each in a process of its own so that time and peak memory
(the maximum resident set) are its alone, side by side:

- `hf.export` of the examples/01-llama source with those weights, against a
  plain file copy of the same bytes (`shutil.copyfile`; aim: at most 1.2x);
- `gguf.export` at f32, f16 and q8_0, against llama.cpp's own converter
  (`convert_hf_to_gguf.py` from `--llama-cpp DIR`, e.g. the `vendor/llama.cpp`
  folder of the `llama-cpp-python` source package, run with its own `gguf-py`);
  aim: at most 10 s and 1 GB each. The converter needs a tokenizer it knows:
  with `sentencepiece` importable a word-level `tokenizer.model` is trained into
  the folder, otherwise the peer column says why it is missing;
- `convert` of the folder into a model card (aim: under 2 s, no weight bytes copied).

    .venv/bin/python bench/hf_gguf.py [--layers N] [--small] [--keep DIR] [--llama-cpp DIR]
                                      [--only hf|gguf|convert ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "01-llama" / "src" / "lib.linnet"
TINYLLAMA = {"Vocab": 32000, "H": 2048, "Heads": 32, "KvHeads": 4, "Inner": 5632, "Layers": 22}
SMALL = {"Vocab": 512, "H": 128, "Heads": 4, "KvHeads": 2, "Inner": 352, "Layers": 2}
EXTRA = {"HeadDim": 0, "RopeTheta": 10000, "EpsInverse": 100000, "MaxSeq": 2048, "Batch": 1}


def generics(sizes: dict[str, int]) -> dict[str, object]:
    return {**sizes, **EXTRA, "HeadDim": sizes["H"] // sizes["Heads"], "T": "f32"}


def peak_bytes(who: int = resource.RUSAGE_SELF) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # Linux: kilobytes


def prepare(sizes: dict[str, int], folder: Path) -> None:
    """config.json + model.safetensors of seeded random weights, written tensor by tensor."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "src"))
    from linnet import pipeline
    from linnet.hf.families import FAMILIES
    from linnet.weights import specs_from_model
    from linnet.weights.safetensors import save_safetensors_streamed

    if (folder / "model.safetensors").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    model = pipeline.load_model(SOURCE, generics=generics(sizes))
    specs = {p: s for p, s in specs_from_model(model).items() if not s.optional}
    rng = np.random.default_rng(0)

    def load(path: str) -> Any:
        return (rng.standard_normal(specs[path].shape, np.float32) * 0.02).astype(np.float32)

    items = [(p, "f32", s.shape) for p, s in specs.items()]
    save_safetensors_streamed(folder / "model.safetensors", items, load, {"format": "pt"})
    config = FAMILIES["llama"].config(
        {k: v for k, v in generics(sizes).items() if isinstance(v, int | str)}, False, set()
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _tokenizer_model(folder, sizes["Vocab"])


def _tokenizer_model(folder: Path, vocab: int) -> None:
    """A word-level SentencePiece `tokenizer.model` with `vocab` pieces, if sentencepiece exists."""
    try:
        import sentencepiece
    except ImportError:
        return
    words = [f"w{i:05d}" for i in range(vocab * 2)]
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[i : i + 16]) for i in range(0, len(words), 16)))
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=vocab,
        model_type="word", bos_id=1, eos_id=2, unk_id=0, hard_vocab_limit=False,
    )  # fmt: skip
    (folder / "tokenizer.vocab").unlink(missing_ok=True)
    corpus.unlink()


def child(kind: str, folder: Path, out: Path, sizes: dict[str, int], llama_cpp: str | None) -> None:
    """One measurement in this process; prints {"seconds", "peak", "note"} as JSON."""
    sys.path.insert(0, str(ROOT / "src"))
    note = ""
    start = time.perf_counter()
    who = resource.RUSAGE_SELF
    if kind == "copy":
        shutil.copyfile(folder / "model.safetensors", out / "model.safetensors")
    elif kind == "hf":
        import linnet.hf

        linnet.hf.export(
            SOURCE, out, generics=generics(sizes), weights=folder / "model.safetensors"
        )
    elif kind.startswith("gguf-"):
        import linnet.gguf

        linnet.gguf.export(
            SOURCE, out / "model.gguf", generics=generics(sizes),
            weights=folder / "model.safetensors", outtype=kind[5:], modelfile=False,
        )  # fmt: skip
    elif kind.startswith("peer-"):
        assert llama_cpp is not None
        paths = [
            str(Path(llama_cpp) / "gguf-py"),
            str(Path(llama_cpp)),
            os.environ.get("PYTHONPATH", ""),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        script = Path(llama_cpp) / "convert_hf_to_gguf.py"
        done = subprocess.run(
            [sys.executable, str(script), str(folder), "--outtype", kind[5:],
             "--outfile", str(out / "peer.gguf")],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        who = resource.RUSAGE_CHILDREN
        if done.returncode != 0:
            note = (done.stderr.strip().splitlines() or ["failed"])[-1][:120]
    elif kind == "convert":
        from linnet.convert import convert

        card = convert(folder, output=out / "card")
        copied = sum(p.stat().st_size for p in card.folder.rglob("*.safetensors"))
        note = f"{copied} weight bytes in the card"
    seconds = time.perf_counter() - start
    usage = resource.getrusage(who)
    cpu = usage.ru_utime + usage.ru_stime
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak_bytes(who), "note": note}))


def measure(kind: str, folder: Path, sizes: dict[str, int], args: argparse.Namespace) -> Any:
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        command = [
            sys.executable, __file__, "--child", kind, "--keep", str(folder.parent),
            "--out", scratch, "--layers", str(sizes["Layers"]),
        ]  # fmt: skip
        if args.small:
            command.append("--small")
        if args.llama_cpp:
            command += ["--llama-cpp", args.llama_cpp]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return {"seconds": float("nan"), "cpu": float("nan"), "peak": 0,
                    "note": done.stderr.strip()[-160:]}  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--keep", default=None)
    parser.add_argument("--llama-cpp", default=None)
    parser.add_argument("--child", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--only", nargs="+", choices=("hf", "gguf", "convert"), default=None,
        help="measure only these rows (default: all)",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers is not None:
        sizes["Layers"] = args.layers
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hf_gguf_"))
    folder = keep / f"llama-{sizes['H']}x{sizes['Layers']}"
    if args.child == "prepare":
        prepare(sizes, folder)
        return
    if args.child:
        child(args.child, folder, Path(args.out), sizes, args.llama_cpp)
        return
    start = time.perf_counter()
    # in a child: a child's peak resident set starts from its parent's, so the parent stays small
    command = [sys.executable, __file__, "--child", "prepare", "--keep", str(keep), "--out", "-"]
    command += ["--layers", str(sizes["Layers"])] + (["--small"] if args.small else [])
    subprocess.run(command, check=True, capture_output=True)
    size = (folder / "model.safetensors").stat().st_size
    print(f"model: {sizes}, {size / 1e9:.2f} GB of f32 weights (prepared in "
          f"{time.perf_counter() - start:.1f} s, {folder})")  # fmt: skip
    peer_ok = args.llama_cpp and (folder / "tokenizer.model").is_file()
    only = set(args.only or ("hf", "gguf", "convert"))
    rows = [("hf.export", "hf", "file copy", "copy")] if "hf" in only else []
    rows += [
        (f"gguf {t}", f"gguf-{t}", f"convert_hf_to_gguf {t}", f"peer-{t}")
        for t in ("f32", "f16", "q8_0")
        if "gguf" in only
    ]
    # cpu: user + system seconds of the process (the peer's: of its converter), which a
    # machine shared with other work inflates far less than the wall-clock seconds
    print(f"{'ours':<16}{'s':>8}{'cpu s':>7}{'peak GB':>9}  {'peer':<24}{'s':>8}{'cpu s':>7}"
          f"{'peak GB':>9}{'ratio':>7}")  # fmt: skip
    for label, kind, peer_label, peer_kind in rows:
        ours = measure(kind, folder, sizes, args)
        if peer_kind == "copy" or peer_ok:
            theirs = measure(peer_kind, folder, sizes, args)
        else:
            why = "no --llama-cpp" if not args.llama_cpp else "no tokenizer.model (sentencepiece)"
            theirs = {"seconds": float("nan"), "cpu": float("nan"), "peak": 0, "note": why}
        ratio = (
            ours["seconds"] / theirs["seconds"]
            if theirs["seconds"] == theirs["seconds"]
            else float("nan")
        )
        print(
            f"{label:<16}{ours['seconds']:>8.2f}{ours['cpu']:>7.1f}{ours['peak'] / 1e9:>9.2f}  "
            f"{peer_label:<24}{theirs['seconds']:>8.2f}{theirs['cpu']:>7.1f}"
            f"{theirs['peak'] / 1e9:>9.2f}{ratio:>7.2f}"
            + (f"  ({theirs['note']})" if theirs.get("note") else "")
            + (f"  [ours: {ours['note']}]" if ours.get("note") else "")
        )
    if "convert" not in only:
        return
    card = measure("convert", folder, sizes, args)
    print(f"{'convert':<16}{card['seconds']:>8.2f}{card['peak'] / 1e9:>9.2f}  ({card['note']})")


if __name__ == "__main__":
    main()
