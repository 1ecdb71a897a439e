"""`CausalLM`: a `LinnetModule` as the causal LM that transformers' `Trainer` and TRL expect.

Stage: training, beside `linnet.train.train`, for people whose loop is
transformers' `Trainer` or TRL's `SFTTrainer` / `DPOTrainer` / `GRPOTrainer`.
In: a trainable decoder (`linnet.torch.load(..., trainable=True)`) whose root
declares `hidden_packed` and `loss_packed` (the decoder examples do). Out: an
`nn.Module` whose `forward(input_ids, attention_mask=None, labels=None,
num_items_in_batch=None)` returns transformers' `CausalLMOutput`:

- each row of `input_ids` runs as its own packed segment, positions counted
  from its first unmasked token (so right padding, and left padding too,
  change nothing of the real tokens); masked tokens are a segment of their own
  and predict nothing;
- with `labels` (`-100` ignored, shifted by one as transformers does), `loss`
  is the summed token cross entropy of the model's `loss_packed` entry (the
  logits are never materialised) divided by `num_items_in_batch` when given
  (how `Trainer` accumulates), else by the labelled tokens: transformers'
  `ForCausalLMLoss`; `logits` are then not computed;
- without labels, `logits = hidden @ head^T`.

TRL's trainers patch the model's `forward` with their fused LM head
(`trl.trainer.utils.add_fused_lm_head`), which runs `base_model(...)` for the
last hidden states and reads `get_output_embeddings().weight`: `base_model` is
the `hidden_packed` entry of the same packed layout and the output embedding
is the model's own head tensor (`head`, `lm_head.weight` by default; GPT-2's
is tied to `transformer.wte.weight`), so gradients reach the Linnet
parameters. The attributes the trainers read (`config`, `generation_config`,
`add_model_tags`) are here too. Gradient checkpointing is refused: pass
`gradient_checkpointing=False` (TRL's configs turn it on by default).
`generate` is transformers' (`linnet.train.interop_generate`: left-padded
prompts, greedy or sampled with transformers' logits processors), which is
what `GRPOTrainer` samples with when `use_vllm=False`; it reruns the whole
sequence each step, so `linnet.train.grpo` with `linnet.serve.Engine` is the
fast way to sample. A LoRA adapter on the head itself is not seen by the fused
head (it reads the stored weight).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from linnet.errors import LinnetError
from linnet.torch.module import LinnetModule
from linnet.train import interop_generate
from linnet.train.data import Batch
from linnet.train.entries import HIDDEN, LOSS, run


class CausalLM(nn.Module):
    """The adapter (see the module docstring); `module` holds the Linnet parameters."""

    main_input_name = "input_ids"
    is_gradient_checkpointing = False
    _keys_to_ignore_on_save: list[str] | None = None

    def __init__(self, module: LinnetModule, *, head: str = "lm_head.weight") -> None:
        super().__init__()
        import transformers

        for entry in (HIDDEN, LOSS):
            if entry not in module.entries:
                raise LinnetError(
                    f"CausalLM: the model has no `{entry}` entry (entries: "
                    f"{', '.join(module.entries)}); the decoder examples declare it"
                )
        weight = module.tensor(head)
        if weight.dim() != 2:
            raise LinnetError(f"CausalLM: the head `{head}` is not a [Vocab, H] weight")
        self.module = module
        self.head_path = head
        vocab, hidden = weight.shape
        options: dict[str, Any] = {
            "vocab_size": int(vocab),
            "hidden_size": int(hidden),
            "use_cache": False,
        }
        self.config: Any = transformers.PretrainedConfig(**options)
        self.generation_config: Any = transformers.GenerationConfig()  # type: ignore[no-untyped-call]

    # -- what the trainers read ------------------------------------------------------------

    def add_model_tags(self, tags: Iterable[str] | str) -> None:
        """Trainers tag the model card; there is no card here."""

    def gradient_checkpointing_enable(self, *args: Any, **kwargs: Any) -> None:
        raise LinnetError(
            "CausalLM: gradient checkpointing is not supported; pass gradient_checkpointing=False"
        )

    def get_output_embeddings(self) -> Any:
        """The head as a linear layer's view: its `weight` is the Linnet tensor itself."""
        return SimpleNamespace(weight=self.module.tensor(self.head_path), bias=None)

    def get_input_embeddings(self) -> Any:
        raise LinnetError("CausalLM: the input embeddings are not exposed (no resizing)")

    @property
    def base_model(self) -> _Backbone:
        return _Backbone(self.module)

    # -- sampling --------------------------------------------------------------------------

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        generation_config: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Prompts followed by new tokens, as transformers' `generate` (`interop_generate`)."""
        config = interop_generate.resolve(self.generation_config, generation_config, kwargs)
        head = self.module.tensor(self.head_path)

        def next_logits(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            last = hidden_states(self.module, ids, mask)[:, -1]
            return last @ head.T.to(last.dtype)

        with torch.no_grad():
            return interop_generate.generate(next_logits, input_ids, attention_mask, config)

    # -- the forward -----------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs: Any,
    ) -> Any:
        from transformers.modeling_outputs import CausalLMOutput

        _refuse(kwargs)
        if labels is None:
            hidden = hidden_states(self.module, input_ids, attention_mask)
            head = self.module.tensor(self.head_path)
            return CausalLMOutput(loss=None, logits=hidden @ head.T.to(hidden.dtype))
        targets = torch.zeros_like(labels)
        targets[:, :-1] = labels[:, 1:]
        weights = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
        weights[:, :-1] = (labels[:, 1:] != -100).float()
        if attention_mask is not None:
            weights = weights * attention_mask.to(weights.dtype)
        targets = targets.clamp(min=0)
        batch = packed(input_ids, attention_mask, targets, weights)
        total = run(self.module, LOSS, batch.inputs())
        count = weights.sum() if num_items_in_batch is None else num_items_in_batch
        divisor = torch.as_tensor(count, dtype=total.dtype, device=total.device).clamp(min=1)
        return CausalLMOutput(loss=total / divisor, logits=None)


class _Backbone:
    """`base_model(input_ids, attention_mask=...)`: the last hidden states `[B, S, H]`."""

    def __init__(self, module: LinnetModule) -> None:
        self.module = module

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        kwargs.pop("use_cache", None)
        _refuse(kwargs)
        return SimpleNamespace(
            last_hidden_state=hidden_states(self.module, input_ids, attention_mask)
        )


def _refuse(kwargs: dict[str, Any]) -> None:
    """Inputs the adapter has no use for are errors, except those that change nothing."""
    unknown = {k for k, v in kwargs.items() if v is not None} - {
        "return_dict",
        "output_router_logits",
    }
    if unknown:
        raise LinnetError(f"CausalLM: unsupported inputs {', '.join(sorted(unknown))}")


def packed(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    targets: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> Batch:
    """`[B, S]` rows as one packed batch of `B * S` positions (module docstring)."""
    rows, width = input_ids.shape
    device = input_ids.device
    mask = (
        torch.ones(rows, width, dtype=torch.bool, device=device)
        if attention_mask is None
        else attention_mask.bool()
    )
    positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)
    row = torch.arange(rows, device=device)[:, None].expand(rows, width)
    segments = torch.where(mask, row, row + rows)
    flat_targets = torch.zeros(rows * width, dtype=torch.long, device=device)
    flat_weights = torch.zeros(rows * width, dtype=torch.float32, device=device)
    if targets is not None and weights is not None:
        flat_targets = targets.reshape(-1).long()
        flat_weights = weights.reshape(-1).float()
    spans = tuple((r * width, width) for r in range(rows))
    return Batch(
        input_ids.reshape(-1).to(torch.int32),
        positions.reshape(-1).to(torch.int32),
        segments.reshape(-1).to(torch.int32),
        flat_targets,
        flat_weights,
        spans,
        tuple(range(rows)),
    )


def hidden_states(
    module: LinnetModule, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """The final hidden states `[B, S, H]` of the rows (each its own segment)."""
    rows, width = input_ids.shape
    batch = packed(input_ids, attention_mask)
    hidden = run(module, HIDDEN, batch.inputs(targets=False))
    return hidden.reshape(rows, width, -1)
