"""An Ollama `Modelfile` beside a GGUF file, with the chat template translated.

Stage: part of `linnet.gguf`. The tokenizer's Jinja chat template is recognised
as one of the common formats by its marker tokens (ChatML `<|im_start|>`,
Llama-3 `<|start_header_id|>`, Llama-2 `[INST]`, Zephyr `<|user|>`) and written
as Ollama's Go template with that format's stop strings. Another template is
not translated (Jinja cannot be run here): the Modelfile then has no TEMPLATE
and says so in a comment, and `Modelfile.template` is None.
"""

from __future__ import annotations

import os
from pathlib import Path

from linnet.atomic import write_bytes
from linnet.records import record

TEMPLATES: dict[str, tuple[str, tuple[str, ...]]] = {
    "chatml": (
        "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
        "{{ end }}<|im_start|>assistant\n",
        ("<|im_start|>", "<|im_end|>"),
    ),
    "llama3": (
        "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
        "{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n",
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    ),
    "llama2": (
        "[INST] {{ if .System }}<<SYS>>\n{{ .System }}\n<</SYS>>\n\n{{ end }}{{ .Prompt }} [/INST]",
        ("[INST]", "[/INST]", "<<SYS>>", "<</SYS>>"),
    ),
    "zephyr": (
        "{{ if .System }}<|system|>\n{{ .System }}</s>\n{{ end }}{{ if .Prompt }}<|user|>\n"
        "{{ .Prompt }}</s>\n{{ end }}<|assistant|>\n",
        ("<|system|>", "<|user|>", "<|assistant|>", "</s>"),
    ),
}


@record(frozen=True)
class Modelfile:
    path: Path
    template: str | None


def recognise_template(jinja: str | None) -> str | None:
    """The common format a Jinja chat template writes, by its marker tokens, or None."""
    if not jinja:
        return None
    if "<|im_start|>" in jinja:
        return "chatml"
    if "<|start_header_id|>" in jinja:
        return "llama3"
    if "[INST]" in jinja:
        return "llama2"
    if "<|user|>" in jinja and "<|assistant|>" in jinja:
        return "zephyr"
    return None


def write_modelfile(
    gguf_file: str | os.PathLike[str],
    chat_template: str | None,
    output: str | os.PathLike[str] | None = None,
) -> Modelfile:
    """`Modelfile` (beside `gguf_file` unless `output`) whose FROM names the GGUF file."""
    model = Path(gguf_file)
    target = Path(output) if output is not None else model.parent / "Modelfile"
    source = os.path.relpath(model.resolve(), target.resolve().parent)
    lines = [f"FROM ./{source}" if not source.startswith("..") else f"FROM {model.resolve()}"]
    kind = recognise_template(chat_template)
    if kind is None:
        if chat_template:
            lines.append("# the tokenizer's chat template is not one of ChatML, Llama-2/3, Zephyr")
    else:
        template, stops = TEMPLATES[kind]
        lines.append(f'TEMPLATE """{template}"""')
        lines += [f'PARAMETER stop "{stop}"' for stop in stops]
    write_bytes(target, ("\n".join(lines) + "\n").encode("utf-8"))
    return Modelfile(target, kind)
