"""Benchmark: `linnet.hf.export`, `linnet.gguf.export` and `linnet.convert` at TinyLlama shape.

A Llama with TinyLlama-1.1B shapes (22 layers, H=2048, 32 heads, 4 KV heads,
inner 5632, vocabulary 32000, f32, seeded random weights) is written once as a
transformers folder (`config.json` + `model.safetensors`, kept in `--keep DIR`
and reused). Then, each in a process of its own so that time and peak memory
(the maximum resident set) are its alone, side by side:

- `hf.export` of the examples/01-llama source with those weights, against a
  plain file copy of the same bytes (`shutil.copyfile`; aim: at most 1.2x);
- `gguf.export` at f32, f16 and q8_0 (bf16 too with `--only gguf-bf16`),
  against llama.cpp's own converter (`convert_hf_to_gguf.py` from
  `--llama-cpp DIR`, e.g. the `vendor/llama.cpp` folder of the
  `llama-cpp-python` source package, run with its own `gguf-py`; `--no-peer`
  leaves it out);
  aim: at most 10 s and 1 GB each. The converter needs a tokenizer it knows:
  with `sentencepiece` importable a word-level `tokenizer.model` is trained into
  the folder, otherwise the peer column says why it is missing;
- `convert` of the folder into a model card (aim: under 2 s, no weight bytes copied);
- llama.cpp's decode speed (`llama_cpp`, llama-cpp-python, 2 threads) on our GGUF
  and on llama.cpp's file of the same weights, f32, q8_0 and q4_0 (the
  converter's f32 and q8_0; q4_0 is its f32 file through llama.cpp's quantiser,
  `llama_model_quantize` with every tensor Q4_0, which is what our q4_0 holds):
  greedy `--new` tokens after an 8-token prompt, the two files in alternating
  rounds (`--rounds`), tokens/s of each round; the two must give the same
  tokens. Needs `llama_cpp` importable and the converter.

`--llama-cpp` defaults to `$LINNET_LLAMA_CPP_CONVERTER` (as the slow tests read it).
The machine's load average is printed before and after and with each round:
timings on a shared machine are noisy, so compare the alternating rounds (who goes
first alternates too; before each measurement dirty pages are synced, and the source
file is read once just before the clock starts, so each starts from the same page
cache), not single figures;
with `--repeat` above 1 the medians and the fastest of each side are printed too.

    .venv/bin/python bench/hf_gguf.py [--layers N] [--small] [--keep DIR] [--llama-cpp DIR]
                                      [--only hf|gguf|gguf-T|convert|decode ...] [--no-peer]
                                      [--repeat N] [--new N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
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
    if kind == "hf":
        # Imported before the clock starts, with the modules export imports when it runs
        # (checker, binder, ...): the file copy it is compared with pays no import either
        # (the gguf rows include theirs, as the converter's process does). The lexer and
        # parser too: without them the clock counted their import (compiled from source,
        # 0.05-0.1 s, where PYTHONDONTWRITEBYTECODE is set) as source checking.
        import linnet.check.checker
        import linnet.check.modules
        import linnet.check.prelude
        import linnet.gguf
        import linnet.hf
        import linnet.ir.bind
        import linnet.pipeline
        import linnet.syntax.parser
        import linnet.weights
    # The source read once, after the imports and just before the clock starts, so that
    # each row starts with it in the page cache (where memory allows), not whichever
    # row comes after other work on the machine evicted it
    chunk = bytearray(1 << 24)
    with (folder / "model.safetensors").open("rb", buffering=0) as source:
        while source.readinto(chunk):
            pass
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    who = resource.RUSAGE_SELF
    if kind == "copy":
        shutil.copyfile(folder / "model.safetensors", out / "model.safetensors")
    elif kind == "hf":
        spans = _kernel_copies()
        linnet.hf.export(
            SOURCE, out, generics=generics(sizes), weights=folder / "model.safetensors"
        )
        inside = sum(spans)
        outside = time.perf_counter() - start - inside
        note = f"{len(spans)} kernel copies, {inside:.2f} s; {outside:.2f} s outside them"
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
    if who == resource.RUSAGE_SELF:  # the timed part's, not the imports before it
        cpu -= before.ru_utime + before.ru_stime
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak_bytes(who), "note": note}))


def _kernel_copies() -> list[float]:
    """The seconds of each `os.copy_file_range` call from now on in this process: what an
    export spends outside them (checking, binding, headers, Python per tensor) is its cost
    over the file copy, a figure the machine's I/O load sways far less than the total."""
    spans: list[float] = []
    copy = os.copy_file_range

    def timed(*args: Any) -> int:
        begin = time.perf_counter()
        try:
            return copy(*args)
        finally:
            spans.append(time.perf_counter() - begin)

    os.copy_file_range = timed
    return spans


GGUF_TYPES = ("f32", "f16", "bf16", "q8_0")
DECODE_TYPES = ("f32", "q8_0", "q4_0")
DECODE_PROMPT = 8


def decode_files(folder: Path, where: Path, sizes: dict[str, int], llama_cpp: str) -> None:
    """`ours-T.gguf` (gguf.export) and `peer-T.gguf` (the converter, q4_0 through
    llama.cpp's quantiser) for each of `DECODE_TYPES`, under `where`."""
    import llama_cpp as llama

    import linnet.gguf

    for outtype in DECODE_TYPES:
        linnet.gguf.export(
            SOURCE, where / f"ours-{outtype}.gguf", generics=generics(sizes),
            weights=folder / "model.safetensors", outtype=outtype, tokenizer=folder,
            name="bench", modelfile=False,
        )  # fmt: skip
    paths = [str(Path(llama_cpp) / "gguf-py"), str(llama_cpp), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    for outtype in ("f32", "q8_0"):
        subprocess.run(
            [sys.executable, str(Path(llama_cpp) / "convert_hf_to_gguf.py"), str(folder),
             "--outtype", outtype, "--outfile", str(where / f"peer-{outtype}.gguf"),
             "--model-name", "bench"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
    params = llama.llama_model_quantize_default_params()
    params.ftype = llama.LLAMA_FTYPE_MOSTLY_Q4_0
    params.pure = True
    params.nthread = 2
    source, target = str(where / "peer-f32.gguf"), str(where / "peer-q4_0.gguf")
    if llama.llama_model_quantize(source.encode(), target.encode(), params) != 0:
        raise SystemExit("llama_model_quantize failed")


def decode_speeds(where: Path, new: int, rounds: int) -> None:
    """Per outtype, tokens/s of each round on our file and the peer's, alternating;
    prints {outtype: {"ours": [...], "peer": [...], "same": bool}} as JSON."""
    import llama_cpp as llama
    import numpy as np

    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 500, DECODE_PROMPT)]
    out: dict[str, dict[str, Any]] = {}
    for outtype in DECODE_TYPES:
        speeds: dict[str, list[float]] = {"ours": [], "peer": []}
        tokens: dict[str, list[int]] = {}
        for _ in range(rounds):
            for side in ("ours", "peer"):
                model = llama.Llama(
                    str(where / f"{side}-{outtype}.gguf"), n_ctx=DECODE_PROMPT + new + 8,
                    n_threads=2, n_threads_batch=2, logits_all=True, verbose=False,
                )  # fmt: skip
                model.eval(prompt)
                chosen = [int(np.argmax(model.scores[model.n_tokens - 1]))]
                start = time.perf_counter()
                for _ in range(new - 1):
                    model.eval([chosen[-1]])
                    chosen.append(int(np.argmax(model.scores[model.n_tokens - 1])))
                speeds[side].append((new - 1) / (time.perf_counter() - start))
                tokens[side] = chosen
                model.close()
        out[outtype] = {**speeds, "same": tokens["ours"] == tokens["peer"]}
    print(json.dumps(out))


def decode_rows(folder: Path, sizes: dict[str, int], args: argparse.Namespace) -> None:
    """The decode part: files written in one child, timed in another."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or not args.llama_cpp:
        why = "`llama_cpp` is not importable" if args.llama_cpp else "no --llama-cpp"
        print(f"decode: skipped ({why})")
        return
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        base = [sys.executable, __file__, "--keep", str(folder.parent), "--out", scratch]
        base += ["--layers", str(sizes["Layers"]), "--llama-cpp", args.llama_cpp]
        base += ["--small"] if args.small else []
        timing = [*base, "--child", "decode", "--new", str(args.new), "--rounds", str(args.rounds)]
        for command in ([*base, "--child", "decode-files"], timing):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"decode: failed\n{done.stderr[-2000:]}")
                return
    results = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"llama.cpp decode, 2 threads, {args.new} tokens, {args.rounds} alternating rounds "
          "(tokens/s of each round)")  # fmt: skip
    for outtype, row in results.items():
        ours, peer = row["ours"], row["peer"]
        ratio = statistics.median(ours) / statistics.median(peer)
        print(
            f"  {outtype:<5} ours {' '.join(f'{v:6.2f}' for v in ours)}   "
            f"llama.cpp's file {' '.join(f'{v:6.2f}' for v in peer)}   "
            f"median ratio {ratio:.3f}   same tokens: {row['same']}"
        )


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


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
        # The previous row's gigabytes of dirty pages written back first: otherwise the
        # kernel throttles whichever row comes next, and rows alternate who pays.
        os.sync()
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
    parser.add_argument("--llama-cpp", default=os.environ.get("LINNET_LLAMA_CPP_CONVERTER"))
    parser.add_argument("--new", type=int, default=32, help="decode: tokens per round")
    parser.add_argument("--rounds", type=int, default=3, help="decode: rounds per file")
    parser.add_argument("--child", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--only", nargs="+", default=None,
        choices=("hf", "gguf", *(f"gguf-{t}" for t in GGUF_TYPES), "convert", "decode"),
        help="measure only these rows (default: all; gguf: its f32, f16 and q8_0 rows)",
    )  # fmt: skip
    parser.add_argument(
        "--no-peer", action="store_true", help="gguf rows without llama.cpp's converter"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of each hf/gguf row, ours and peer alternating",
    )
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else TINYLLAMA)
    if args.layers is not None:
        sizes["Layers"] = args.layers
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hf_gguf_"))
    folder = keep / f"llama-{sizes['H']}x{sizes['Layers']}"
    if args.child == "prepare":
        prepare(sizes, folder)
        return
    if args.child == "decode-files":
        sys.path.insert(0, str(ROOT / "src"))
        decode_files(folder, Path(args.out), sizes, args.llama_cpp)
        return
    if args.child == "decode":
        decode_speeds(Path(args.out), args.new, args.rounds)
        return
    if args.child:
        child(args.child, folder, Path(args.out), sizes, args.llama_cpp)
        return
    print(f"load average {load_average()}")
    start = time.perf_counter()
    # in a child: a child's peak resident set starts from its parent's, so the parent stays small
    command = [sys.executable, __file__, "--child", "prepare", "--keep", str(keep), "--out", "-"]
    command += ["--layers", str(sizes["Layers"])] + (["--small"] if args.small else [])
    subprocess.run(command, check=True, capture_output=True)
    size = (folder / "model.safetensors").stat().st_size
    print(f"model: {sizes}, {size / 1e9:.2f} GB of f32 weights (prepared in "
          f"{time.perf_counter() - start:.1f} s, {folder})")  # fmt: skip
    peer_ok = args.llama_cpp and (folder / "tokenizer.model").is_file()
    only = set(args.only or ("hf", "gguf", "convert", "decode"))
    rows = [("hf.export", "hf", "file copy", "copy")] if "hf" in only else []
    rows += [
        (f"gguf {t}", f"gguf-{t}", f"convert_hf_to_gguf {t}", f"peer-{t}")
        for t in GGUF_TYPES
        if f"gguf-{t}" in only or ("gguf" in only and t != "bf16")
    ]
    # cpu: user + system seconds of the timed part (the peer's: of its converter process),
    # which a machine shared with other work inflates far less than the wall-clock seconds
    if rows:
        print(f"{'ours':<16}{'s':>8}{'cpu s':>7}{'peak GB':>9}  {'peer':<24}{'s':>8}{'cpu s':>7}"
              f"{'peak GB':>9}{'ratio':>7}")  # fmt: skip
    seconds: dict[str, list[float]] = {}
    for index, (label, kind, peer_label, peer_kind) in enumerate(
        row for row in rows for _ in range(args.repeat)
    ):
        has_peer = peer_kind == "copy" or (peer_ok and not args.no_peer)
        # who goes first alternates round by round: the first of the two may find the
        # source's pages evicted (by other work on the machine) and pay for reading them
        peer_first = has_peer and index % args.repeat % 2 == 1
        if peer_first:
            theirs = measure(peer_kind, folder, sizes, args)
        ours = measure(kind, folder, sizes, args)
        if has_peer and not peer_first:
            theirs = measure(peer_kind, folder, sizes, args)
        elif not has_peer:
            why = "no --llama-cpp" if not args.llama_cpp else "no tokenizer.model (sentencepiece)"
            why = "--no-peer" if args.no_peer else why
            theirs = {"seconds": float("nan"), "cpu": float("nan"), "peak": 0, "note": why}
        seconds.setdefault(label, []).append(ours["seconds"])
        seconds.setdefault(peer_label, []).append(theirs["seconds"])
        ratio = (
            ours["seconds"] / theirs["seconds"]
            if theirs["seconds"] == theirs["seconds"]
            else float("nan")
        )
        print(
            f"{label:<16}{ours['seconds']:>8.2f}{ours['cpu']:>7.1f}{ours['peak'] / 1e9:>9.2f}  "
            f"{peer_label:<24}{theirs['seconds']:>8.2f}{theirs['cpu']:>7.1f}"
            f"{theirs['peak'] / 1e9:>9.2f}{ratio:>7.2f}  load {os.getloadavg()[0]:.2f}"
            + (" (peer first)" if peer_first else "")
            + (f"  ({theirs['note']})" if theirs.get("note") else "")
            + (f"  [ours: {ours['note']}]" if ours.get("note") else "")
        )
    for label, _, peer_label, _ in rows:
        mine, peers = seconds[label], [v for v in seconds[peer_label] if v == v]
        if args.repeat > 1 and peers:
            print(
                f"{label}: median {statistics.median(mine):.2f} s, fastest {min(mine):.2f} s; "
                f"{peer_label}: median {statistics.median(peers):.2f} s, fastest "
                f"{min(peers):.2f} s; fastest / fastest {min(mine) / min(peers):.2f}, "
                f"median / median {statistics.median(mine) / statistics.median(peers):.2f}"
            )
    if "convert" in only:
        card = measure("convert", folder, sizes, args)
        print(f"{'convert':<16}{card['seconds']:>8.2f}{card['peak'] / 1e9:>9.2f}  ({card['note']})")
    if "decode" in only:
        decode_rows(folder, sizes, args)
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
