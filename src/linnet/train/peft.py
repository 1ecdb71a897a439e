"""LoRA adapters as PEFT files: `save_lora`, `load_lora`.

Stage: training output and input, beside `linnet.train.lora`. The format is
the one `peft` writes and reads (`PeftModel.save_pretrained`,
`PeftModel.from_pretrained`), so an adapter trained here loads onto the
transformers model and one trained with `peft` loads here:

- `adapter_config.json`: `peft_type` `LORA`, `r`, `lora_alpha`, `lora_dropout`,
  `fan_in_fan_out`, `use_rslora`, `target_modules` (the exact module names),
  `rank_pattern` / `alpha_pattern` for modules whose rank or alpha differ
  from `r` / `lora_alpha` (keys are regular expressions matched at the end of
  a module name, as `peft.utils.other.get_pattern_key` does);
- `adapter_model.safetensors`: `base_model.model.<module>.lora_A.weight`
  `[r, in]` and `...lora_B.weight` `[out, r]` per adapted module.

Names. PEFT adapts modules, Linnet parameters: the module of a weight is its
checkpoint name without `.weight` (`model.layers.0.self_attn.q_proj.weight` is
the module `model.layers.0.self_attn.q_proj`). The examples' parameter paths
are the transformers names already; a model loaded with bindings passes
`names` (path -> checkpoint name). GPT-2's `Conv1D` stores `[in, out]`, which
PEFT marks `fan_in_fan_out: true`; `lora_A` and `lora_B` keep PEFT's shapes
either way (`linnet.train.lora`).

Only SafeTensors is read (an `adapter_model.bin` is a pickle and refused),
files are written atomically (`linnet.atomic`), and a config using what this
module does not implement (DoRA, LoRA biases, `modules_to_save`, layer
replication, trainable tokens, adapters on embeddings) is a `LinnetError`
naming the option rather than an adapter silently loaded wrong.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from linnet.torch.dtypes import linnet_dtype, to_numpy, to_torch
from linnet.torch.module import LinnetModule
from linnet.train.lora import (
    LoraAdapter,
    add_lora,
    check_lora_targets,
    lora_adapters,
    param_paths,
    remove_lora,
)
from linnet.train.peft_format import (
    CONFIG,
    PEFT_VERSION,
    PREFIX,
    WEIGHTS,
    AdapterFile,
    check_adapter,
    read_adapters,
    write_adapters,
)
from linnet.weights.safetensors import linnet_dtype_of

__all__ = ["CONFIG", "PEFT_VERSION", "PREFIX", "WEIGHTS", "load_lora", "save_lora"]


def save_lora(
    model: LinnetModule,
    folder: str | os.PathLike[str],
    *,
    names: Mapping[str, str] | None = None,
    base_model: str | None = None,
    task_type: str | None = None,
) -> Path:
    """Write the model's adapters to `folder` as PEFT files; returns the folder.

    `names` maps a parameter path to its checkpoint name where they differ;
    `base_model` and `task_type` fill the config's `base_model_name_or_path`
    and `task_type` (`"CAUSAL_LM"` makes `PeftModel.from_pretrained` build a
    `PeftModelForCausalLM`). `LinnetError` when the model has no adapter, a
    weight's name does not end in `.weight`, or the adapters mix dropout or
    layout (one config holds one of each).
    """
    adapters = [
        AdapterFile(
            path=a.path,
            rank=a.rank,
            alpha=a.alpha,
            dropout=a.dropout_p,
            fan_in_fan_out=a.fan_in_fan_out,
            use_rslora=a.use_rslora,
            lora_A=_array(a.lora_A),
            lora_B=_array(a.lora_B),
        )
        for a in lora_adapters(model)
    ]
    return write_adapters(folder, adapters, names=names, base_model=base_model, task_type=task_type)


def load_lora(
    model: LinnetModule,
    folder: str | os.PathLike[str],
    *,
    names: Mapping[str, str] | None = None,
) -> list[LoraAdapter]:
    """Attach the adapters of a PEFT folder to `model`; returns them in path order.

    Adapters already on those paths are replaced; every param is frozen as by
    `add_lora`. `names` maps parameter paths to checkpoint names where they
    differ (as for `save_lora`). `LinnetError` naming the file, tensor or
    option for a missing or malformed file, an option this module does not
    implement, a module the model lacks, or shapes that do not fit the weight.
    """
    found = read_adapters(folder, param_paths(model), names=names)
    check_lora_targets(model, [a.path for a in found], replacing=True)
    for read in found:
        check_adapter(read, tuple(model.tensor(read.path).shape), folder, names)
    remove_lora(model, [a.path for a in found])
    added: list[LoraAdapter] = []
    for stored in found:
        (adapter,) = add_lora(
            model,
            glob.escape(stored.path),
            rank=stored.rank,
            alpha=stored.alpha,
            dropout=stored.dropout,
            fan_in_fan_out=stored.fan_in_fan_out,
            use_rslora=stored.use_rslora,
        )
        with torch.no_grad():
            a, b = stored.lora_A, stored.lora_B
            adapter.lora_A.copy_(to_torch(a, linnet_dtype_of(a)).to(adapter.lora_A.dtype))
            adapter.lora_B.copy_(to_torch(b, linnet_dtype_of(b)).to(adapter.lora_B.dtype))
        added.append(adapter)
    return added


def _array(parameter: torch.Tensor) -> np.ndarray:
    dtype = linnet_dtype(parameter.dtype)
    assert dtype is not None  # adapters are float tensors
    return to_numpy(parameter, dtype)
