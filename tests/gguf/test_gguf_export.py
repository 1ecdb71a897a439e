"""`linnet.gguf.export` against transformers' GGUF loader (and llama.cpp, slow).

Per family the example source with seeded random weights is written as GGUF and
loaded by `from_pretrained(folder, gguf_file=...)`, which undoes llama.cpp's
layout (the llama Q/K permutation, GPT-2's transposes) on its own (qwen3 with
head_dim 128, the only one that loader builds): f32 logits
equal linnet.torch's within 1e-5 and 32 greedy tokens agree; f16 and bf16 equal
linnet.torch on the same rounded weights; q8_0 and q4_0 equal linnet.torch on
the dequantised blocks (so the bytes are llama.cpp's format) and stay within
the quantisation error of the float logits. The tokenizer's vocabulary and
merges are read back with gguf's own reader; the Modelfile's templates. Slow,
with `llama_cpp` importable: llama.cpp runs every family's f32 and f16 file with
linnet.torch's logits, and at f32 32 greedy tokens through its KV cache
(test_gguf_converter.py compares the quantised files with llama.cpp's converter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import family_support as fs  # noqa: E402

import linnet.gguf  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.gguf.modelfile import recognise_template  # noqa: E402

LOADABLE = fs.FAMILIES


def case_generics(family: str) -> dict[str, object]:
    binds = fs.generics(family)
    if family == "gpt2":  # the loader keeps GPT2Config's n_positions (1024)
        binds["Positions"] = 1024
        binds["MaxSeq"] = 64
    if family == "qwen3":  # the loader reads no head_dim: Qwen3Config's default, 128
        binds["HeadDim"] = 128
    return binds


def weights_of(family: str, seed: int = 0) -> dict[str, Any]:
    binds = case_generics(family) if family == "qwen3" else None  # (gpt2: wpe below)
    weights = fs.linnet_weights(family, seed=seed, binds=binds)
    if family == "gpt2":
        rng = np.random.default_rng(seed + 100)
        weights["transformer.wpe.weight"] = rng.normal(0, 0.15, (1024, 32)).astype(np.float32)
    return weights


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    fs.save_tokenizer(folder)
    return folder


def hf_from_gguf(path: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, attn_implementation="eager"
    ).eval()


def linnet_model(family: str, weights: dict[str, Any]) -> Any:
    return linnet_torch.load(fs.source(family), generics=case_generics(family), weights=weights)


def gap(a: Any, b: Any) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


@pytest.mark.parametrize("family", LOADABLE)
def test_f32_gguf_loads_in_transformers_with_equal_logits(
    family: str, tmp_path: Path, tokenizer: Path
) -> None:
    weights = weights_of(family, seed=1)
    path = tmp_path / f"{family}.gguf"
    result = linnet.gguf.export(
        fs.source(family), path, generics=case_generics(family), weights=weights,
        outtype="f32", tokenizer=tokenizer,
    )  # fmt: skip
    assert result.family == family and path.is_file()
    reference = hf_from_gguf(path)
    tokens = fs.tokens_of((2, 9), seed=2)
    expected = fs.linnet_logits(linnet_model(family, weights), tokens)
    actual = fs.hf_logits(reference, tokens)
    assert gap(actual, expected) <= 1e-5
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize("family", LOADABLE)
def test_greedy_tokens_agree_for_32_steps(family: str, tmp_path: Path, tokenizer: Path) -> None:
    weights = weights_of(family, seed=3)
    path = tmp_path / f"{family}.gguf"
    linnet.gguf.export(
        fs.source(family), path, generics=case_generics(family), weights=weights, outtype="f32",
        tokenizer=tokenizer,
    )  # fmt: skip
    reference = hf_from_gguf(path)
    prompt = fs.tokens_of((1, 5), seed=4)
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        expected = reference.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=32,
            min_new_tokens=32,
        )[:, 5:]
    chosen = fs.linnet_greedy(linnet_model(family, weights), prompt, 32)
    np.testing.assert_array_equal(chosen, expected.numpy())


def rounded(weights: dict[str, Any], dtype: Any) -> dict[str, Any]:
    return {k: v.astype(dtype).astype(np.float32) if v.ndim == 2 else v for k, v in weights.items()}


@pytest.mark.parametrize("outtype", ["f16", "bf16"])
def test_half_outtypes_equal_linnet_on_the_rounded_weights(
    outtype: str, tmp_path: Path, tokenizer: Path
) -> None:
    import ml_dtypes

    weights = weights_of("qwen2", seed=5)
    path = tmp_path / "qwen2.gguf"
    linnet.gguf.export(
        fs.source("qwen2"), path, generics=case_generics("qwen2"), weights=weights, outtype=outtype,
        tokenizer=tokenizer,
    )  # fmt: skip
    reader = gguf.GGUFReader(path)
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == outtype.upper()
    assert kinds["blk.0.attn_q.bias"] == "F32" and kinds["output_norm.weight"] == "F32"
    if outtype == "bf16":  # transformers' GGUF loader does not read BF16 blocks
        stored = {t.name: t for t in reader.tensors}["blk.1.ffn_down.weight"]
        half = weights["model.layers.1.mlp.down_proj.weight"].astype(ml_dtypes.bfloat16)
        values = gguf.quants.dequantize(stored.data, stored.tensor_type)
        np.testing.assert_array_equal(values, half.astype(np.float32))
        return
    reference = hf_from_gguf(path)
    tokens = fs.tokens_of((1, 8), seed=6)
    expected = fs.linnet_logits(linnet_model("qwen2", rounded(weights, np.float16)), tokens)
    assert gap(fs.hf_logits(reference, tokens), expected) <= 1e-4


@pytest.mark.parametrize("outtype", ["q8_0", "q4_0"])
def test_quantised_outtypes_are_llama_cpp_blocks(
    outtype: str, tmp_path: Path, tokenizer: Path
) -> None:
    weights = weights_of("llama", seed=7)
    path = tmp_path / "llama.gguf"
    linnet.gguf.export(
        fs.source("llama"), path, generics=case_generics("llama"), weights=weights, outtype=outtype,
        tokenizer=tokenizer,
    )  # fmt: skip
    reader = gguf.GGUFReader(path)
    stored = {t.name: t for t in reader.tensors}
    assert stored["blk.0.ffn_up.weight"].tensor_type.name == outtype.upper()
    qtype = stored["blk.0.ffn_up.weight"].tensor_type

    def stored_values(v: Any) -> Any:
        if v.ndim < 2:
            return v
        if v.shape[-1] % 32:  # rows that do not split into blocks fall back to f16
            return v.astype(np.float16).astype(np.float32)
        return gguf.quants.dequantize(gguf.quants.quantize(v, qtype), qtype)

    assert stored["blk.0.ffn_down.weight"].tensor_type.name == "F16"  # rows of 48
    blocks = {k: stored_values(v) for k, v in weights.items()}
    reference = hf_from_gguf(path)
    tokens = fs.tokens_of((1, 8), seed=8)
    dequantised = fs.linnet_logits(linnet_model("llama", blocks), tokens)
    assert gap(fs.hf_logits(reference, tokens), dequantised) <= 1e-4
    full = fs.linnet_logits(linnet_model("llama", weights), tokens)
    # a sanity bound only: the blocks are gguf-py's quantiser, the one llama.cpp's converter calls
    bound = {"q8_0": 0.2, "q4_0": 1.5}[outtype]  # logits of size ~3
    assert gap(dequantised, full) <= bound


def test_qwen3_tensors_names_and_metadata(tmp_path: Path) -> None:
    weights = weights_of("qwen3", seed=9)
    fs.save_tokenizer(tmp_path / "tok")
    path = tmp_path / "qwen3.gguf"
    linnet.gguf.export(
        fs.source("qwen3"),
        path,
        generics=case_generics("qwen3"),
        weights=weights,
        outtype="f32",
        tokenizer=tmp_path / "tok",
        name="tiny-qwen3",
    )
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    assert fields["general.architecture"] == "qwen3"
    assert fields["general.name"] == "tiny-qwen3"
    assert fields["qwen3.attention.key_length"] == 128
    assert fields["qwen3.attention.head_count_kv"] == 2
    assert fields["qwen3.rope.freq_base"] == 1000000.0
    assert abs(fields["qwen3.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
    assert len(fields["tokenizer.ggml.tokens"]) == 67
    assert fields["tokenizer.ggml.tokens"][:4] == ["<unk>", "<s>", "</s>", "a"]
    assert fields["tokenizer.ggml.merges"][0] == "a a"
    assert fields["tokenizer.ggml.eos_token_id"] == 2
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    np.testing.assert_array_equal(
        stored["blk.1.attn_k_norm.weight"], weights["model.layers.1.self_attn.k_norm.weight"]
    )
    np.testing.assert_array_equal(  # NEOX rope: no permutation for qwen3
        stored["blk.0.attn_q.weight"], weights["model.layers.0.self_attn.q_proj.weight"]
    )
    assert "output.weight" in stored
    assert (tmp_path / "Modelfile").read_text().startswith("FROM ./qwen3.gguf")


def test_llama_q_and_k_rows_are_permuted(tmp_path: Path) -> None:
    weights = weights_of("llama", seed=10)
    path = tmp_path / "llama.gguf"
    linnet.gguf.export(
        fs.source("llama"), path, generics=case_generics("llama"), weights=weights, outtype="f32"
    )
    stored = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(path).tensors}
    q = weights["model.layers.0.self_attn.q_proj.weight"]
    assert not np.array_equal(stored["blk.0.attn_q.weight"], q)
    # head 0 row 1 of llama.cpp's order is rotate-half row D/2 (the pair of row 0)
    np.testing.assert_array_equal(stored["blk.0.attn_q.weight"][1], q[4])
    np.testing.assert_array_equal(
        stored["blk.0.attn_v.weight"], weights["model.layers.0.self_attn.v_proj.weight"]
    )


def test_bad_outtype_and_non_bpe_tokenizer_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="outtype 'q5_k' is not one of"):
        linnet.gguf.export(
            fs.source("llama"), tmp_path / "x.gguf", generics=case_generics("llama"),
            weights=weights_of("llama"), outtype="q5_k",
        )  # fmt: skip
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    with pytest.raises(LinnetError, match="a 'Unigram' model; only BPE"):
        linnet.gguf.export(
            fs.source("llama"), tmp_path / "x.gguf", generics=case_generics("llama"),
            weights=weights_of("llama"), tokenizer=tok,
        )  # fmt: skip
    assert not (tmp_path / "x.gguf").exists()


def test_modelfile_templates(tmp_path: Path) -> None:
    assert recognise_template("{% for m in messages %}<|im_start|>{{ m.role }}") == "chatml"
    assert recognise_template("<|start_header_id|>{{ role }}<|end_header_id|>") == "llama3"
    assert recognise_template("{{ bos_token }}[INST] {{ content }} [/INST]") == "llama2"
    assert recognise_template("<|user|>\n{{ c }}</s>\n<|assistant|>") == "zephyr"
    assert recognise_template("{{ messages }}") is None
    (tmp_path / "m.gguf").write_bytes(b"")
    made = linnet.gguf.write_modelfile(tmp_path / "m.gguf", "<|im_start|>user")
    text = made.path.read_text()
    assert made.template == "chatml"
    assert text.startswith('FROM ./m.gguf\nTEMPLATE """{{- range .Messages }}<|im_start|>')
    assert 'PARAMETER stop "<|im_end|>"' in text


@pytest.mark.slow
@pytest.mark.parametrize("outtype", ["f32", "f16"])
@pytest.mark.parametrize("family", fs.FAMILIES)
def test_llama_cpp_runs_our_gguf_like_linnet(family: str, outtype: str, tmp_path: Path) -> None:
    """llama.cpp (llama-cpp-python, built from source) on our file: the logits of a prompt
    equal linnet.torch's on the same stored weights (f32: f32 math in another order, 2e-3;
    f16: llama.cpp also rounds the activations to f16 in its products, 3e-2), greedy
    (argmax) tokens agree; at f32, 32 greedy tokens decoded through llama.cpp's KV cache
    equal linnet.torch's `prefill` + `decode`."""
    llama_cpp = pytest.importorskip("llama_cpp")
    weights = weights_of(family, seed=15)  # (seed 11: GPT-2 and Qwen3 repeat one token)
    fs.save_tokenizer(tmp_path / "tok")
    path = tmp_path / f"{family}.gguf"
    linnet.gguf.export(
        fs.source(family), path, generics=case_generics(family), weights=weights,
        outtype=outtype, tokenizer=tmp_path / "tok", name="linnet-test",
    )  # fmt: skip
    # (the name: llama.cpp looks up Phi-3's `<|end|>` token when general.name says phi3,
    # and this small tokenizer has none)
    model = llama_cpp.Llama(
        str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0
    )  # an f32 KV cache (GGML type 0)
    prompt = fs.tokens_of((1, 8), seed=12)
    model.eval(prompt[0].tolist())
    stored = weights if outtype == "f32" else rounded(weights, np.float16)
    module = linnet_model(family, stored)
    ours = fs.linnet_logits(module, prompt)[0]
    theirs = np.asarray(model.scores[:8])
    assert gap(theirs, ours) <= {"f32": 2e-3, "f16": 3e-2}[outtype]
    np.testing.assert_array_equal(theirs.argmax(-1), ours.argmax(-1))
    if outtype == "f32":  # 32 greedy tokens through llama.cpp's KV cache and Linnet's
        chosen = [int(theirs[-1].argmax())]
        for _ in range(1, 32):
            model.eval([chosen[-1]])
            chosen.append(int(np.asarray(model.scores[model.n_tokens - 1]).argmax()))
        expected = fs.linnet_greedy(module, prompt, 32)[0].tolist()
        assert chosen == expected
        assert len(set(expected)) > 1, "a constant run proves little"


LLAMA3 = {
    "RopeFactor": 8,
    "RopeLowFreqFactor": 1,
    "RopeHighFreqFactor": 4,
    "RopeOriginalMaxSeq": 16,
}


def llama3_generics() -> dict[str, object]:
    return {**case_generics("llama"), **LLAMA3}


def test_llama3_rope_freqs_are_the_divisors_transformers_applies(tmp_path: Path) -> None:
    """`rope_freqs.weight` holds, per frequency, default / llama3-scaled inverse frequency
    (llama.cpp divides its default frequencies by it), against transformers' own
    `_compute_llama3_parameters` on the same config."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    path = tmp_path / "llama3.gguf"
    result = linnet.gguf.export(
        fs.source("llama"), path, generics=llama3_generics(), weights=weights_of("llama"),
        outtype="f32",
    )  # fmt: skip
    reader = gguf.GGUFReader(path)
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert result.tensors == len(stored)
    values = fs.CASES["llama"][1]
    config = transformers.LlamaConfig(
        hidden_size=values["H"], num_attention_heads=values["Heads"], head_dim=values["HeadDim"],
        rope_parameters={
            "rope_type": "llama3", "rope_theta": float(str(values["RopeTheta"])), "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    )  # fmt: skip
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    default, _ = ROPE_INIT_FUNCTIONS["linear"](  # factor 1: the default frequencies
        transformers.LlamaConfig(
            hidden_size=values["H"], num_attention_heads=values["Heads"],
            head_dim=values["HeadDim"],
            rope_parameters={
                "rope_type": "linear", "factor": 1.0,
                "rope_theta": float(str(values["RopeTheta"])),
            },
        ),
        "cpu",
    )  # fmt: skip
    expected = (default / scaled).numpy()
    np.testing.assert_allclose(stored["rope_freqs.weight"], expected, rtol=2e-6)
    assert stored["rope_freqs.weight"].dtype == np.float32
    assert (stored["rope_freqs.weight"] > 1).any() and (stored["rope_freqs.weight"] < 8).any()


def test_llama3_scaling_of_other_families_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match="reads the rope_freqs tensor only for llama"):
        linnet.gguf.export(
            fs.source("qwen2"), tmp_path / "q.gguf",
            generics={**case_generics("qwen2"), **LLAMA3}, weights=weights_of("qwen2"),
        )  # fmt: skip
    assert not (tmp_path / "q.gguf").exists()


SENTENCES = ["the lazy fox", "a linnet sings at dawn", "hello world"]


def test_sentencepiece_vocabulary_is_written_as_llama_cpp_converts_it(tmp_path: Path) -> None:
    """Tokenizer model "llama", every piece with its score and type (unknown, control,
    normal; padding unused up to the model's vocabulary), special ids and the bos flag;
    transformers' GGUF tokenizer then encodes text as sentencepiece does."""
    spm = pytest.importorskip("sentencepiece")
    tok = fs.save_sentencepiece(tmp_path / "tok")
    path = tmp_path / "llama.gguf"
    linnet.gguf.export(
        fs.source("llama"), path, generics=case_generics("llama"), weights=weights_of("llama"),
        outtype="f32", tokenizer=tok,
    )  # fmt: skip
    processor = spm.SentencePieceProcessor(model_file=str(tok / "tokenizer.model"))
    reader = gguf.GGUFReader(path)

    def field(key: str) -> list[Any]:
        f = reader.fields[key]
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]

    vocab = int(str(fs.CASES["llama"][1]["Vocab"]))
    assert field("tokenizer.ggml.model") == ["llama"]
    assert field("tokenizer.ggml.pre") == ["default"]
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == vocab
    pieces = [processor.IdToPiece(i) for i in range(processor.vocab_size())]
    assert tokens[: len(pieces)] == pieces
    assert tokens[len(pieces) :] == [f"[PAD{i}]" for i in range(len(pieces), vocab)]
    scores = field("tokenizer.ggml.scores")
    assert scores[5:60] == pytest.approx([processor.GetScore(i) for i in range(5, 60)])
    types = field("tokenizer.ggml.token_type")
    kinds = gguf.TokenType
    assert types[:4] == [kinds.UNKNOWN, kinds.CONTROL, kinds.CONTROL, kinds.CONTROL]
    assert set(types[4:60]) == {kinds.NORMAL} and set(types[60:]) == {kinds.UNUSED}
    assert field("tokenizer.ggml.bos_token_id") == [1]
    assert field("tokenizer.ggml.eos_token_id") == [2]
    assert field("tokenizer.ggml.add_bos_token") == [True]
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in SENTENCES:
        assert loaded(text).input_ids == [1, *processor.encode(text)]


@pytest.mark.slow
def test_llama_cpp_runs_llama3_scaling_with_a_sentencepiece_vocabulary(tmp_path: Path) -> None:
    """llama.cpp on a llama3-scaled llama with a SentencePiece vocabulary: its tokens of
    plain text are sentencepiece's, and its logits of a 24-token prompt (past the original
    context of 16) equal linnet.torch's (2e-3, argmax equal), which differ from the
    unscaled model's."""
    llama_cpp = pytest.importorskip("llama_cpp")
    spm = pytest.importorskip("sentencepiece")
    tok = fs.save_sentencepiece(tmp_path / "tok")
    weights = weights_of("llama", seed=3)
    path = tmp_path / "llama3.gguf"
    linnet.gguf.export(
        fs.source("llama"), path, generics=llama3_generics(), weights=weights, outtype="f32",
        tokenizer=tok, name="linnet-test",
    )  # fmt: skip
    model = llama_cpp.Llama(
        str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0
    )
    processor = spm.SentencePieceProcessor(model_file=str(tok / "tokenizer.model"))
    for text in SENTENCES:
        assert model.tokenize(text.encode(), add_bos=False) == processor.encode(text)
    prompt = fs.tokens_of((1, 24), seed=12, vocab=60)
    model.eval(prompt[0].tolist())
    theirs = np.asarray(model.scores[:24])
    ours = fs.linnet_logits(
        linnet_torch.load(fs.source("llama"), generics=llama3_generics(), weights=weights), prompt
    )[0]
    assert gap(theirs, ours) <= 2e-3
    np.testing.assert_array_equal(theirs.argmax(-1), ours.argmax(-1))
    unscaled = fs.linnet_logits(linnet_model("llama", weights), prompt)[0]
    assert gap(theirs, unscaled) > 1e-1


SHORT_FACTORS = [1.0, 1.1, 1.25, 1.5]
LONG_FACTORS = [2.0, 3.5, 7.0, 11.0]


def longrope_case(original: int, positions: int) -> tuple[dict[str, object], dict[str, Any]]:
    """Generics and weights of the phi3 example with longrope factors (the source's
    `rope_factors` buffer), original context `original`, `positions` in all."""
    weights = {
        **weights_of("phi3", seed=5),
        "rope_factors": np.asarray([SHORT_FACTORS, LONG_FACTORS], dtype=np.float32),
    }
    binds = {**case_generics("phi3"), "RopeOriginalMaxSeq": original}
    return {**binds, "RopeMaxPositions": positions}, weights


def test_phi3_longrope_is_written_as_the_converter_writes_it(tmp_path: Path) -> None:
    """The factors as `rope_factors_long/short.weight` (f32), the context length, the
    original context and the attention factor sqrt(1 + ln 4 / ln 16) as metadata."""
    binds, weights = longrope_case(16, 64)
    path = tmp_path / "phi3.gguf"
    linnet.gguf.export(fs.source("phi3"), path, generics=binds, weights=weights, outtype="f16")
    reader = gguf.GGUFReader(path)
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    np.testing.assert_array_equal(stored["rope_factors_long.weight"], LONG_FACTORS)
    np.testing.assert_array_equal(stored["rope_factors_short.weight"], np.float32(SHORT_FACTORS))
    assert stored["rope_factors_long.weight"].dtype == np.float32
    assert "rope_factors" not in stored

    def value(key: str) -> Any:
        field = reader.fields[key]
        return field.parts[field.data[0]].tolist()[0]

    assert value("phi3.context_length") == 64
    assert value("phi3.rope.scaling.original_context_length") == 16
    assert value("phi3.rope.scaling.attn_factor") == pytest.approx(
        np.sqrt(1 + np.log(4) / np.log(16))
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("original", "n_ctx", "length", "factors"),
    [(256, 256, 12, "short"), (16, 64, 24, "long")],
)
def test_llama_cpp_runs_phi3_longrope_like_linnet(
    original: int, n_ctx: int, length: int, factors: str, tmp_path: Path
) -> None:
    """llama.cpp picks the long factors when its context (at least 256 in
    llama-cpp-python) exceeds the original one, transformers and Linnet when the sequence
    does; where both pick the same factors, llama.cpp's logits equal linnet.torch's."""
    llama_cpp = pytest.importorskip("llama_cpp")
    binds, weights = longrope_case(original, 4 * original)
    binds["MaxSeq"] = 64
    path = tmp_path / "phi3.gguf"
    fs.save_tokenizer(tmp_path / "tok")
    linnet.gguf.export(
        fs.source("phi3"), path, generics=binds, weights=weights, outtype="f32",
        tokenizer=tmp_path / "tok", name="linnet-test",
    )  # fmt: skip
    model = llama_cpp.Llama(
        str(path), n_ctx=n_ctx, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0
    )
    prompt = fs.tokens_of((1, length), seed=12)
    model.eval(prompt[0].tolist())
    theirs = np.asarray(model.scores[:length])
    module = linnet_torch.load(fs.source("phi3"), generics=binds, weights=weights)
    ours = fs.linnet_logits(module, prompt)[0]
    assert (length > original) == (factors == "long")
    assert gap(theirs, ours) <= 2e-3
    np.testing.assert_array_equal(theirs.argmax(-1), ours.argmax(-1))
