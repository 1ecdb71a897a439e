"""`CausalLM.generate`: sampling from a Linnet decoder the way transformers' `generate` does.

Stage: training interop, for TRL's `GRPOTrainer` (and anyone calling
`generate` on `linnet.train.interop.CausalLM`). In: left- or right-padded
prompts `[B, P]`, their attention mask, a `transformers.GenerationConfig`
and keyword overrides. Out: the prompts followed by the new tokens `[B, P + N]`,
as transformers returns them.

The options are resolved as transformers resolves them (the passed config,
then the model's `generation_config`, then transformers' global defaults, then
the keyword arguments), and the next token is chosen by transformers' own
logits processors in transformers' order (repetition penalty; when sampling,
temperature, top-k, top-p, min-p) and by `torch.multinomial` over their
softmax, or the argmax when not sampling: so with the same weights and the
same torch seed the tokens are transformers' tokens. A row that produced an
eos token is padded with `pad_token_id` from then on; generation stops after
`max_new_tokens` (else `max_length` minus the prompt) or when every row has
finished. Each step runs the whole sequence again (no KV cache): this is for
training loops on small batches, `linnet.serve.Engine` is the fast path.
Options that would change the output and are not implemented here (beams,
several sequences per prompt, banned words, ...) are refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from linnet.errors import LinnetError

Logits = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# option -> the value under which it changes nothing (transformers' global default)
_UNSUPPORTED = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "min_length": 0,
    "min_new_tokens": None,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
    "encoder_repetition_penalty": 1.0,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "guidance_scale": None,
    "renormalize_logits": False,
    "remove_invalid_values": False,
    "stop_strings": None,
    "max_time": None,
    "watermarking_config": None,
    "return_dict_in_generate": False,
    "output_scores": False,
    "output_logits": False,
    "assistant_model": None,
    "prompt_lookup_num_tokens": None,
}


def resolve(model_config: Any, given: Any, overrides: dict[str, Any]) -> Any:
    """The effective `GenerationConfig` (module docstring); unknown or unsupported options
    are a `LinnetError` naming them."""
    import transformers

    config = copy.deepcopy(given) if given is not None else copy.deepcopy(model_config)
    config.update(**model_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    config.update(**config._get_default_generation_params(), defaults_only=True)
    unknown = config.update(**overrides)
    if unknown:
        raise LinnetError(f"CausalLM.generate: unsupported inputs {', '.join(sorted(unknown))}")
    changed = [
        name
        for name, default in _UNSUPPORTED.items()
        if getattr(config, name, default) not in (default, None)
    ]
    if changed:
        raise LinnetError(f"CausalLM.generate: unsupported options {', '.join(sorted(changed))}")
    if not isinstance(config, transformers.GenerationConfig):
        raise LinnetError("CausalLM.generate: generation_config is not a GenerationConfig")
    return config


def _eos_ids(config: Any) -> list[int]:
    eos = config.eos_token_id
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]


def _processors(config: Any, mask: torch.Tensor) -> Any:
    import transformers

    processors = transformers.LogitsProcessorList()
    if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
        padding = (mask != 0).int().argmax(dim=1)
        processors.append(
            transformers.RepetitionPenaltyLogitsProcessor(
                config.repetition_penalty, prompt_ignore_length=padding
            )
        )
    if config.do_sample:
        if config.temperature is not None and config.temperature != 1.0:
            processors.append(transformers.TemperatureLogitsWarper(config.temperature))
        if config.top_k is not None and config.top_k != 0:
            processors.append(transformers.TopKLogitsWarper(top_k=config.top_k))
        if config.top_p is not None and config.top_p < 1.0:
            processors.append(transformers.TopPLogitsWarper(top_p=config.top_p))
        if config.min_p is not None:
            processors.append(transformers.MinPLogitsWarper(min_p=config.min_p))
    return processors


def generate(
    next_logits: Logits,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    config: Any,
) -> torch.Tensor:
    """Prompts `[B, P]` and the tokens chosen after them (module docstring); `next_logits`
    maps `(ids, mask)` to the logits `[B, Vocab]` of each row's last position."""
    if input_ids.dim() != 2:
        raise LinnetError("CausalLM.generate: input_ids must be [Batch, Length]")
    rows, width = input_ids.shape
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    if mask.shape != input_ids.shape:
        raise LinnetError("CausalLM.generate: attention_mask must have the shape of input_ids")
    steps = config.max_new_tokens
    if steps is None:
        steps = int(config.max_length) - width
    eos = _eos_ids(config)
    pad = config.pad_token_id
    if pad is None:
        pad = eos[0] if eos else None
    if eos and pad is None:
        raise LinnetError("CausalLM.generate: eos_token_id is set but no pad_token_id")
    processors = _processors(config, mask)
    ids = input_ids
    unfinished = torch.ones(rows, dtype=torch.bool, device=ids.device)
    eos_tensor = torch.tensor(eos, dtype=ids.dtype, device=ids.device)
    for _ in range(max(steps, 0)):
        logits = next_logits(ids, mask).to(torch.float32)
        scores = processors(ids, logits)
        if config.do_sample:
            tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            tokens = torch.argmax(scores, dim=-1)
        if eos:
            tokens = torch.where(unfinished, tokens, torch.full_like(tokens, int(pad)))
        ids = torch.cat([ids, tokens[:, None].to(ids.dtype)], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        if eos:
            unfinished &= ~torch.isin(tokens.to(ids.dtype), eos_tensor)
            if not bool(unfinished.any()):
                break
    return ids
