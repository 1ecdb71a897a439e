"""transformers 4.x beside the project's transformers 5, for the slow tests of `linnet.hf.export`.

The issue asks that an exported `config.json` load in transformers 5 and in the
4.x line that vLLM and SGLang pinned (SGLang 0.5.5 to 0.5.9 pin
`transformers==4.57.1`; vLLM up to 0.19 wants `>=4.56,<5`). The project's venv
holds transformers 5, whose `huggingface_hub` and `tokenizers` are too new for
4.57 (it wants `huggingface-hub<1.0` and `tokenizers<=0.23.0`), so those three
are unpacked with `--no-deps` into a folder of their own, never into the venv:

    python tools/hf4x.py prepare [DIR]   # default: $LINNET_HF4X or ~/.cache/linnet/hf4x

A process with the folder first on `PYTHONPATH` imports transformers 4.57.1
and its two companions from it and everything else (torch, safetensors, numpy,
regex, ...) from the venv. `prepare` checks exactly that in a child process.

`outputs(jobs)` runs such a child (this file, `python tools/hf4x.py run
JOBS.json`): for each job it loads the folder with
`AutoModelForCausalLM.from_pretrained` (eager attention, the config's own
dtype), writes the forward logits of the job's tokens, the greedy
continuation of its prompt through 4.x's KV cache, the config values that vLLM
and SGLang read from a 4.x config object, and a text encoded by the folder's
tokenizer (`AutoTokenizer`) to an `.npz`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VERSION = "4.57.1"
PACKAGES = (f"transformers=={VERSION}", "tokenizers==0.22.2", "huggingface_hub==0.36.2")
# What the child reports from the loaded config, as vLLM and SGLang read a 4.x config.
CONFIG_KEYS = (
    "model_type",
    "rope_theta",
    "rope_scaling",
    "torch_dtype",
    "max_position_embeddings",
    "original_max_position_embeddings",
    "tie_word_embeddings",
    "head_dim",
    "num_key_value_heads",
    "rms_norm_eps",
    "layer_norm_epsilon",
    "hidden_act",
    "activation_function",
    "sliding_window",
    "bos_token_id",
    "eos_token_id",
)


def default_folder() -> Path:
    given = os.environ.get("LINNET_HF4X")
    if given:
        return Path(given)
    return Path.home() / ".cache" / "linnet" / "hf4x"


def missing(folder: Path) -> str | None:
    """Why transformers 4.x cannot be imported from `folder` (None if it can)."""
    for package in PACKAGES:
        name, version = package.split("==")
        if not list(folder.glob(f"{name}-{version}.dist-info")):
            return f"no {package} under {folder} (run `python tools/hf4x.py prepare`)"
    return None


def environment(folder: Path) -> dict[str, str]:
    """The environment of a child that imports transformers 4.x from `folder`, this
    checkout's `src` after it, and the running venv's packages after both."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT / "src")])
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    env["TRANSFORMERS_VERBOSITY"] = "error"
    env["HF_HUB_OFFLINE"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def prepare(folder: Path) -> None:
    """Unpack the three packages into `folder` and check that a child imports 4.x from it."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade"]
    subprocess.run([*command, "--target", str(folder), *PACKAGES], check=True)
    probe = (
        "import transformers, tokenizers, huggingface_hub, torch;"
        "print(transformers.__version__, tokenizers.__version__,"
        " huggingface_hub.__version__, torch.__version__)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        env=environment(folder),
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or not found.stdout.startswith(VERSION):
        raise SystemExit(f"transformers {VERSION} does not import from {folder}:\n{found.stderr}")
    print(f"transformers, tokenizers, huggingface_hub, torch: {found.stdout.strip()}")
    print(f"ready under {folder}: PYTHONPATH={folder}")


def outputs(jobs: Sequence[Mapping[str, Any]], folder: Path | None = None) -> list[dict[str, Any]]:
    """Run `jobs` in one transformers 4.x child; per job a mapping of its results.

    A job: `folder` (the exported model), `tokens` (int array `[B, S]`: forward
    logits), `prompt` (int array `[1, P]`), `steps` (greedy tokens after it) and
    optionally `text` (encoded with the folder's tokenizer). A result: `version`,
    `architecture`, `parameter_dtype`, `config` (the `CONFIG_KEYS` values),
    `logits`, `generated` and, with a text, `encoded`.
    """
    import numpy as np

    folder = folder or default_folder()
    problem = missing(folder)
    if problem is not None:
        raise RuntimeError(problem)
    with tempfile.TemporaryDirectory(prefix="linnet-hf4x-") as scratch:
        where = Path(scratch)
        listed = []
        for index, job in enumerate(jobs):
            np.save(where / f"tokens{index}.npy", np.asarray(job["tokens"], dtype=np.int64))
            np.save(where / f"prompt{index}.npy", np.asarray(job["prompt"], dtype=np.int64))
            listed.append(
                {
                    "folder": str(job["folder"]),
                    "tokens": str(where / f"tokens{index}.npy"),
                    "prompt": str(where / f"prompt{index}.npy"),
                    "steps": int(job["steps"]),
                    "text": job.get("text"),
                    "out": str(where / f"out{index}.npz"),
                }
            )
        (where / "jobs.json").write_text(json.dumps(listed))
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "run", str(where / "jobs.json")],
            env=environment(folder),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the transformers 4.x child failed:\n{done.stderr[-4000:]}")
        results = []
        for job in listed:
            with np.load(job["out"]) as stored:
                meta = json.loads(str(stored["meta"]))
                results.append(
                    {
                        **meta,
                        "logits": stored["logits"].copy(),
                        "generated": stored["generated"].copy(),
                    }
                )
        return results


def _run(jobs_file: Path) -> None:
    """The child: load each job's folder with transformers 4.x and write its results."""
    import numpy as np
    import torch
    import transformers

    if not transformers.__version__.startswith("4."):
        raise SystemExit(f"this child must import transformers 4.x, not {transformers.__version__}")
    for job in json.loads(jobs_file.read_text()):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            job["folder"], attn_implementation="eager"
        ).eval()
        tokens = torch.from_numpy(np.load(job["tokens"]))
        prompt = torch.from_numpy(np.load(job["prompt"]))
        with torch.no_grad():
            logits = model(tokens).logits.float().numpy()
            generated = _greedy(model, prompt, job["steps"]).numpy()
        config = model.config
        values = {key: getattr(config, key, None) for key in CONFIG_KEYS}
        values["torch_dtype"] = str(values["torch_dtype"]).removeprefix("torch.")
        meta: dict[str, Any] = {
            "version": transformers.__version__,
            "architecture": type(model).__name__,
            "parameter_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "config": values,
        }
        if job.get("text") is not None:
            tokenizer = transformers.AutoTokenizer.from_pretrained(job["folder"])
            meta["encoded"] = list(tokenizer(job["text"])["input_ids"])
        np.savez(job["out"], logits=logits, generated=generated, meta=json.dumps(meta))


def _greedy(model: Any, prompt: Any, steps: int) -> Any:
    """`steps` argmax tokens after `prompt`: one call for the prompt, then one per token
    through the model's own KV cache (no `generate`, whose stopping rules would cut a
    random model's run short at an eos token)."""
    import torch

    out = model(prompt, use_cache=True)
    chosen = [out.logits[:, -1].argmax(-1)]
    for _ in range(1, steps):
        out = model(chosen[-1][:, None], past_key_values=out.past_key_values, use_cache=True)
        chosen.append(out.logits[:, -1].argmax(-1))
    return torch.stack(chosen, dim=1)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        _run(Path(argv[1]))
        return 0
    if not argv or argv[0] != "prepare" or len(argv) > 2:
        print(__doc__)
        return 2
    prepare(Path(argv[1]) if len(argv) == 2 else default_folder())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
