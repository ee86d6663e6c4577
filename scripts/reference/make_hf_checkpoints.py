#!/usr/bin/env python3
"""Hugging Face checkpoints made from GGUF files by transformers, and transformers' own
log-probabilities on them as llama.cpp KL-divergence base files. Runs by hand, not in CI (torch):

    python3 -m venv /opt/hfref
    /opt/hfref/bin/pip install torch transformers accelerate gguf tokenizers sentencepiece protobuf
    /opt/hfref/bin/python scripts/reference/make_hf_checkpoints.py OUT_DIR

For each of models/SmolLM2-135M-Instruct.Q4_1.gguf (smollm2) and models/gemma-3-270m-q4_k_m.gguf
(gemma3): transformers loads the GGUF (gguf_file=, dequantized to F32) and saves it as a checkpoint
in F32 and in BF16, OUT_DIR/<name>-f32 and OUT_DIR/<name>-bf16 (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, chat_template.jinja). smollm2's tokenizer.json is replaced by
tests/data/tokenizer/hf's (transformers' converter leaves out its Digits split; see
make_hf_tokenizer_refs.py).

Then, with BASE = a base file that `baton perplexity --kl-divergence-base BASE` wrote for the
GGUF (it fixes the tokens and the chunking), each checkpoint's transformers log-probabilities for
the same tokens go to OUT_DIR/<name>-<dtype>.transformers.kld, to score baton against with
`baton perplexity --kl-divergence-base FILE --kl-divergence --model CHECKPOINT`:

    /opt/hfref/bin/python scripts/reference/make_hf_checkpoints.py OUT_DIR --kld smollm2=BASE ...

With --tiny (needs build/bin/baton), the committed test checkpoints instead: the tiny synthetic
models of tests/engine/architecture_agreement_test.cc (`baton make-model --shape S`, F32), through
transformers, saved as tests/data/hf/<shape>/ in one weight type each (tiny: F32, tiny-qwen3: BF16,
tiny-gemma3: F16), with transformers' log-probabilities (weights upcast to F32) for the tokens and
chunks of llama.cpp's base tests/data/engine/arch_<shape>_c128.kld in
tests/data/hf/<shape>.transformers_c128.kld. transformers' GGUF reader does not take the head
size from the file (qwen3.attention.key_length), nor Gemma 3's query scale (it takes 256 where the
GGUF implies the head size, 32 here), so the config is given them.

transformers cannot read the tiny mixtures of experts from GGUF (tiny-qwen3moe, tiny-qwen2moe,
tiny-mixtral: it mistakes their shapes, or loads Mixtral as a dense Llama), so --tiny writes
those checkpoints itself, in transformers 4's layout (each expert's matrices on their own; Mixtral's
Q/K rows un-permuted as transformers' GGUF reader does), F32, from the GGUF tensors (gguf-py), with
a config.json naming the same sizes and routing, and tiny's tokenizer (the same vocabulary);
transformers then loads each checkpoint and its log-probabilities are written as above. Their
agreement with llama.cpp's on the GGUF is what shows the layout right.
"""
import argparse
import json
import os
import shutil
import struct
import tarfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = {"smollm2": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
          "gemma3": "models/gemma-3-270m-q4_k_m.gguf"}
LOG_PROB_RANGE = 16.0  # engine/log_prob_file.cc's kLogProbRange


def make_checkpoints(name, out_dir):
    gguf = os.path.join(REPO, MODELS[name])
    d, f = os.path.split(gguf)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(d, gguf_file=f)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the GGUF's; the saved tensors are plain
    state = model.state_dict()
    for dtype in ("f32", "bf16"):
        torch_dtype = torch.float32 if dtype == "f32" else torch.bfloat16
        plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        plain.load_state_dict({k: v.to(torch_dtype) for k, v in state.items()})
        path = os.path.join(out_dir, f"{name}-{dtype}")
        plain.save_pretrained(path)
        tokenizer.save_pretrained(path)
        if name == "smollm2":
            archive = os.path.join(REPO, "tests/data/tokenizer/hf/tokenizers.tar.xz")
            with tarfile.open(archive) as tar, open(os.path.join(path, "tokenizer.json"), "wb") as out:
                shutil.copyfileobj(tar.extractfile("smollm2/tokenizer.json"), out)


TINY = {"tiny": torch.float32, "tiny-qwen3": torch.bfloat16, "tiny-gemma3": torch.float16}


def make_tiny(shape, torch_dtype):
    import subprocess
    import tempfile
    from transformers import AutoConfig
    work = tempfile.mkdtemp()
    gguf = os.path.join(work, "model.gguf")
    subprocess.run([os.path.join(REPO, "build/bin/baton"), "make-model", "--shape", shape,
                    "--out", gguf], check=True, stdout=subprocess.DEVNULL)
    import gguf as gguf_py
    reader = gguf_py.GGUFReader(gguf)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    config = AutoConfig.from_pretrained(work, gguf_file="model.gguf")
    key_length = reader.fields.get(f"{arch}.attention.key_length")
    if key_length is not None:
        config.head_dim = int(key_length.parts[-1][0])
    if arch == "gemma3":
        config.query_pre_attn_scalar = config.head_dim  # what a Gemma 3 GGUF implies
    model = AutoModelForCausalLM.from_pretrained(work, gguf_file="model.gguf", config=config,
                                                 dtype=torch.float32)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict({k: v.to(torch_dtype) for k, v in model.state_dict().items()})
    out = os.path.join(REPO, "tests/data/hf", shape)
    shutil.rmtree(out, ignore_errors=True)
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(work, gguf_file="model.gguf").save_pretrained(out)
    shutil.rmtree(work)
    # transformers' Gemma converter adds a <mask> token past the model's vocabulary (the GGUF has
    # none): a token with no embedding row, which baton refuses; it goes.
    with open(os.path.join(out, "tokenizer.json")) as f:
        tok = json.load(f)
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < config.vocab_size]
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        tok_config = json.load(f)
    tok_config.pop("mask_token", None)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    write_transformers_base(out, os.path.join(REPO, f"tests/data/engine/arch_{shape}_c128.kld"),
                            os.path.join(REPO, f"tests/data/hf/{shape}.transformers_c128.kld"))


MOE = {"tiny-qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
       "tiny-qwen2moe": ("Qwen2MoeForCausalLM", "qwen2_moe"),
       "tiny-mixtral": ("MixtralForCausalLM", "mixtral")}


def gguf_value(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    part = field.parts[-1]
    return bytes(part).decode() if field.types[0].name == "STRING" else part[0].item()


def moe_config(reader, arch, hf_arch, model_type, n_vocab, tied):
    g = lambda key, default=None: gguf_value(reader, f"{arch}.{key}", default)
    heads = g("attention.head_count")
    config = {
        "architectures": [hf_arch], "model_type": model_type,
        "hidden_size": g("embedding_length"), "intermediate_size": g("feed_forward_length"),
        "num_hidden_layers": g("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": g("attention.head_count_kv", heads),
        "head_dim": g("attention.key_length", g("embedding_length") // heads),
        "max_position_embeddings": g("context_length"),
        "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
        "rope_theta": g("rope.freq_base", 10000.0), "vocab_size": n_vocab,
        "tie_word_embeddings": tied, "num_experts_per_tok": g("expert_used_count"),
        "bos_token_id": gguf_value(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": gguf_value(reader, "tokenizer.ggml.eos_token_id"), "dtype": "float32",
    }
    if model_type == "mixtral":
        config.update(num_local_experts=g("expert_count"), sliding_window=None,
                      intermediate_size=g("expert_feed_forward_length", g("feed_forward_length")))
    else:
        config.update(num_experts=g("expert_count"), decoder_sparse_step=1, mlp_only_layers=[],
                      moe_intermediate_size=g("expert_feed_forward_length"),
                      norm_topk_prob=model_type == "qwen3_moe", attention_bias=model_type != "qwen3_moe")
    if model_type == "qwen2_moe":
        config["shared_expert_intermediate_size"] = g("expert_shared_feed_forward_length")
    return config


def moe_tensors(reader, model_type, heads, heads_kv):
    # GGUF name -> Hugging Face name(s), transformers 4's layout.
    experts = "block_sparse_moe.experts" if model_type == "mixtral" else "mlp.experts"
    expert_names = ({"gate": "w1", "up": "w3", "down": "w2"} if model_type == "mixtral" else
                    {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"})
    layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
             "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm",
             "ffn_gate_inp": "block_sparse_moe.gate" if model_type == "mixtral" else "mlp.gate",
             "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
             "ffn_up_shexp": "mlp.shared_expert.up_proj",
             "ffn_down_shexp": "mlp.shared_expert.down_proj",
             "ffn_gate_inp_shexp": "mlp.shared_expert_gate"}

    def unpermute(w, n_head):  # inverse of llama.cpp's permute of llama's Q/K rows
        return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2) \
                .reshape(w.shape)

    out = {}
    for t in reader.tensors:
        data = np.array(t.data, dtype=np.float32)
        name, kind = t.name.rsplit(".", 1)
        if name in ("token_embd", "output_norm", "output"):
            out[{"token_embd": "model.embed_tokens", "output_norm": "model.norm",
                 "output": "lm_head"}[name] + "." + kind] = data
            continue
        _, n, part = name.split(".", 2)
        prefix = f"model.layers.{n}."
        if part.endswith("_exps"):
            which = part[len("ffn_"):-len("_exps")]
            for e in range(data.shape[0]):
                out[f"{prefix}{experts}.{e}.{expert_names[which]}.{kind}"] = data[e]
            continue
        if model_type == "mixtral" and part in ("attn_q", "attn_k"):
            data = unpermute(data, heads if part == "attn_q" else heads_kv)
        if part == "ffn_gate_inp_shexp":
            data = data.reshape(1, -1)
        out[prefix + layer[part] + "." + kind] = data
    return out


def synthetic_gguf(shape, work):
    import subprocess
    import gguf as gguf_py
    gguf = os.path.join(work, "model.gguf")
    subprocess.run([os.path.join(REPO, "build/bin/baton"), "make-model", "--shape", shape,
                    "--out", gguf], check=True, stdout=subprocess.DEVNULL)
    return gguf_py.GGUFReader(gguf)


def write_tiny_checkpoint(shape, config, tensors):
    """tests/data/hf/<shape>/ of `config` and `tensors` (F32), tiny's tokenizer, and the
    transformers base beside it."""
    from safetensors.numpy import save_file
    out = os.path.join(REPO, "tests/data/hf", shape)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(REPO, "tests/data/hf/tiny", name), out)
    write_transformers_base(out, os.path.join(REPO, f"tests/data/engine/arch_{shape}_c128.kld"),
                            os.path.join(REPO, f"tests/data/hf/{shape}.transformers_c128.kld"))


def make_tiny_moe(shape):
    import tempfile
    hf_arch, model_type = MOE[shape]
    work = tempfile.mkdtemp()
    reader = synthetic_gguf(shape, work)
    arch = gguf_value(reader, "general.architecture")
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tied = all(t.name != "output.weight" for t in reader.tensors)
    config = moe_config(reader, arch, hf_arch, model_type, n_vocab, tied)
    tensors = moe_tensors(reader, model_type, config["num_attention_heads"],
                          config["num_key_value_heads"])
    shutil.rmtree(work)
    write_tiny_checkpoint(shape, config, tensors)


def base_config(reader, arch, hf_arch, model_type):
    """config.json's fields every architecture has, from the GGUF."""
    g = lambda key, default=None: gguf_value(reader, f"{arch}.{key}", default)
    heads = g("attention.head_count")
    return {
        "architectures": [hf_arch], "model_type": model_type,
        "hidden_size": g("embedding_length"), "intermediate_size": g("feed_forward_length"),
        "num_hidden_layers": g("block_count"), "num_attention_heads": heads,
        "max_position_embeddings": g("context_length"),
        "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
        "bos_token_id": gguf_value(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": gguf_value(reader, "tokenizer.ggml.eos_token_id"), "dtype": "float32",
    }


def yarn_parameters(reader, arch, **extra):
    g = lambda key, default=None: gguf_value(reader, f"{arch}.{key}", default)
    if g("rope.scaling.type") != "yarn":
        return {"rope_type": "default", "rope_theta": g("rope.freq_base", 10000.0)}
    return {"rope_type": "yarn", "rope_theta": g("rope.freq_base", 10000.0),
            "factor": g("rope.scaling.factor"), "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": g("rope.scaling.original_context_length"),
            **extra}


def global_tensors(reader):
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    out, layers = {}, {}
    for t in reader.tensors:
        data = np.array(t.data, dtype=np.float32)
        name, kind = t.name.rsplit(".", 1)
        if name in names:
            out[names[name] + "." + kind] = data
        else:
            _, n, part = name.split(".", 2)
            layers.setdefault(int(n), {})[part + "." + kind] = data
    return out, layers


def make_tiny_gpt_oss(shape):
    """gpt-oss's layout: experts [E, in, out] with gate and up interleaved (even columns the
    gate), the router with its bias, each head's sink."""
    import tempfile
    work = tempfile.mkdtemp()
    reader = synthetic_gguf(shape, work)
    arch = "gpt-oss"
    g = lambda key, default=None: gguf_value(reader, f"{arch}.{key}", default)
    config = base_config(reader, arch, "GptOssForCausalLM", "gpt_oss")
    n_layer = config["num_hidden_layers"]
    config.update(
        num_key_value_heads=g("attention.head_count_kv"), head_dim=g("attention.key_length"),
        intermediate_size=g("expert_feed_forward_length"), num_local_experts=g("expert_count"),
        num_experts_per_tok=g("expert_used_count"), sliding_window=g("attention.sliding_window"),
        layer_types=["sliding_attention" if l % 2 == 0 else "full_attention"
                     for l in range(n_layer)],
        attention_bias=True, swiglu_limit=7.0, swiglu_alpha=1.702,
        rope_parameters=yarn_parameters(reader, arch, truncate=True))
    rename = {"attn_norm.weight": "input_layernorm.weight",
              "post_attention_norm.weight": "post_attention_layernorm.weight",
              "attn_sinks.weight": "self_attn.sinks",
              "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
              "ffn_down_exps.bias": "mlp.experts.down_proj_bias"}
    for p, hf in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                  ("attn_output", "o_proj")):
        for kind in ("weight", "bias"):
            rename[f"{p}.{kind}"] = f"self_attn.{hf}.{kind}"
    tensors, layers = global_tensors(reader)
    for n, parts in layers.items():
        prefix = f"model.layers.{n}."
        gate, up = parts.pop("ffn_gate_exps.weight"), parts.pop("ffn_up_exps.weight")
        gate_up = np.empty((gate.shape[0], gate.shape[2], 2 * gate.shape[1]), np.float32)
        gate_up[:, :, 0::2] = gate.transpose(0, 2, 1)
        gate_up[:, :, 1::2] = up.transpose(0, 2, 1)
        tensors[prefix + "mlp.experts.gate_up_proj"] = gate_up
        gate_b, up_b = parts.pop("ffn_gate_exps.bias"), parts.pop("ffn_up_exps.bias")
        gate_up_b = np.empty((gate_b.shape[0], 2 * gate_b.shape[1]), np.float32)
        gate_up_b[:, 0::2], gate_up_b[:, 1::2] = gate_b, up_b
        tensors[prefix + "mlp.experts.gate_up_proj_bias"] = gate_up_b
        tensors[prefix + "mlp.experts.down_proj"] = \
            parts.pop("ffn_down_exps.weight").transpose(0, 2, 1)
        for part, data in parts.items():
            tensors[prefix + rename[part]] = data
    shutil.rmtree(work)
    write_tiny_checkpoint(shape, config, tensors)
    # The released gpt-oss models' YaRN leaves its ramp's ends unrounded (truncate: false), which
    # llama.cpp's GGUF rule cannot say: transformers' log-probabilities with it too.
    untruncated = tempfile.mkdtemp()
    shutil.copytree(os.path.join(REPO, "tests/data/hf", shape), untruncated, dirs_exist_ok=True)
    config["rope_parameters"]["truncate"] = False
    with open(os.path.join(untruncated, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_transformers_base(
        untruncated, os.path.join(REPO, f"tests/data/engine/arch_{shape}_c128.kld"),
        os.path.join(REPO, f"tests/data/hf/{shape}.untruncated.transformers_c128.kld"))
    shutil.rmtree(untruncated)


FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def to_mxfp4(w):
    """w [..., rows, cols] (cols a multiple of 32) as OpenAI's MXFP4: blocks [..., rows, cols / 32,
    16] (values 2k and 2k + 1 in byte k's low and high nibbles) and E8M0 scales [..., rows,
    cols / 32], each block's scale the power of two that brings its largest magnitude to at most
    6, each value the nearest E2M1 level."""
    g = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(g).max(axis=-1, keepdims=True)
    exponent = np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)).astype(np.int32)
    scaled = g / np.ldexp(np.float32(1), exponent)
    codes = np.abs(scaled[..., None] - FP4_VALUES).argmin(axis=-1).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks, (exponent[..., 0] + 127).astype(np.uint8)


def make_tiny_gpt_oss_mxfp4(shape="tiny-gpt-oss"):
    """tiny-gpt-oss with its experts in MXFP4 as OpenAI released gpt-oss (quantization_config
    mxfp4; gate_up_proj_blocks [E, 2 * ff, hidden / 32, 16] with gate and up rows interleaved,
    down_proj_blocks [E, hidden, ff / 32, 16], their _scales; biases kept), in
    tests/data/hf/tiny-gpt-oss-mxfp4/, and transformers' log-probabilities on it (its MXFP4
    reader, dequantizing on the CPU)."""
    from safetensors.numpy import load_file, save_file
    src = os.path.join(REPO, "tests/data/hf", shape)
    out = src + "-mxfp4"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    for name in list(tensors):
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            blocks, scales = to_mxfp4(tensors.pop(name).transpose(0, 2, 1))  # [E, out, in]
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_transformers_base(out, os.path.join(REPO, f"tests/data/engine/arch_{shape}_c128.kld"),
                            os.path.join(REPO, f"tests/data/hf/{shape}-mxfp4.transformers_c128.kld"))


def make_tiny_deepseek(shape):
    """DeepSeek's layout: kv_b_proj [heads * (nope + value), kv_lora_rank] (each head's K rows
    then its V rows), experts one by one, shared_experts; V2 (softmax, greedy) or V3 (sigmoid,
    selection bias, groups)."""
    import tempfile
    work = tempfile.mkdtemp()
    reader = synthetic_gguf(shape, work)
    arch = "deepseek2"
    g = lambda key, default=None: gguf_value(reader, f"{arch}.{key}", default)
    v3 = shape == "tiny-deepseek3"
    config = base_config(reader, arch, "DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM",
                         "deepseek_v3" if v3 else "deepseek_v2")
    rope, rank = g("rope.dimension_count"), g("attention.kv_lora_rank")
    nope, value = g("attention.key_length_mla") - rope, g("attention.value_length_mla")
    heads = config["num_attention_heads"]
    mscale = g("rope.scaling.yarn_log_multiplier", 0.0) / 0.1
    config.update(
        num_key_value_heads=heads, head_dim=rope, qk_rope_head_dim=rope, qk_nope_head_dim=nope,
        v_head_dim=value, kv_lora_rank=rank, q_lora_rank=g("attention.q_lora_rank") or None,
        n_routed_experts=g("expert_count"), num_experts_per_tok=g("expert_used_count"),
        moe_intermediate_size=g("expert_feed_forward_length"),
        n_shared_experts=g("expert_shared_count"),
        first_k_dense_replace=g("leading_dense_block_count"),
        routed_scaling_factor=g("expert_weights_scale", 1.0),
        norm_topk_prob=bool(g("expert_weights_norm", False)), attention_bias=False,
        rope_parameters=yarn_parameters(reader, arch, mscale=mscale, mscale_all_dim=mscale))
    if v3:
        assert g("expert_gating_func") == 2
        config.update(n_group=g("expert_group_count"), topk_group=g("expert_group_used_count"),
                      rope_interleave=True, num_nextn_predict_layers=0)
    else:
        assert g("expert_gating_func", 1) == 1 and not config["norm_topk_prob"]
        config.update(topk_method="greedy")
    rename = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
              "attn_q_a.weight": "self_attn.q_a_proj.weight",
              "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
              "attn_q_b.weight": "self_attn.q_b_proj.weight",
              "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
              "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
              "attn_output.weight": "self_attn.o_proj.weight",
              "ffn_norm.weight": "post_attention_layernorm.weight",
              "ffn_gate_inp.weight": "mlp.gate.weight",
              "exp_probs_b.bias": "mlp.gate.e_score_correction_bias"}
    for x in ("gate", "up", "down"):
        rename[f"ffn_{x}.weight"] = f"mlp.{x}_proj.weight"
        rename[f"ffn_{x}_shexp.weight"] = f"mlp.shared_experts.{x}_proj.weight"
    tensors, layers = global_tensors(reader)
    for n, parts in layers.items():
        prefix = f"model.layers.{n}."
        k_b, v_b = parts.pop("attn_k_b.weight"), parts.pop("attn_v_b.weight")  # [H, rank, nope], [H, value, rank]
        tensors[prefix + "self_attn.kv_b_proj.weight"] = \
            np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(heads * (nope + value), rank)
        for x in ("gate", "up", "down"):
            stacked = parts.pop(f"ffn_{x}_exps.weight", None)
            for e in range(0 if stacked is None else stacked.shape[0]):
                tensors[f"{prefix}mlp.experts.{e}.{x}_proj.weight"] = stacked[e]
        for part, data in parts.items():
            tensors[prefix + rename[part]] = data
    shutil.rmtree(work)
    write_tiny_checkpoint(shape, config, tensors)


def read_base(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"_logits_", path
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<3i", data, 8)
    tokens = np.frombuffer(data, dtype="<i4", count=n_ctx * n_chunk, offset=20)
    return n_ctx, n_vocab, n_chunk, tokens


def encode_row(logits, n_vocab):
    # engine/log_prob_file.cc's EncodeLogProbRow, in float32 as there.
    logits = logits.astype(np.float32)
    max_logit = np.float32(logits.max())
    min_logit = np.float32(max(logits.min(), max_logit - np.float32(LOG_PROB_RANGE)))
    log_sum_exp = np.float32(np.log(np.exp((logits - max_logit).astype(np.float64)).sum()))
    min_log_prob = np.float32(min_logit - max_logit - log_sum_exp)
    scale = np.float32((max_logit - min_logit) / np.float32(65535.0))
    words = n_vocab + (n_vocab & 1)
    codes = np.zeros(words, dtype="<u2")
    if scale != 0:
        above = logits > min_logit
        codes[:n_vocab][above] = np.rint((np.float32(1) / scale) * (logits[above] - min_logit))
    head = np.frombuffer(struct.pack("<ff", scale, min_log_prob), dtype="<u2")
    return np.concatenate([head, codes]).tobytes()


def write_transformers_base(checkpoint, base, out):
    n_ctx, n_vocab, n_chunk, tokens = read_base(base)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    bos = tokenizer.bos_token_id if getattr(tokenizer, "add_bos_token", False) else None
    with open(base, "rb") as f:
        header = f.read(20 + 4 * n_ctx * n_chunk)
    with open(out, "wb") as f:
        f.write(header)
        for c in range(n_chunk):
            chunk = tokens[c * n_ctx:(c + 1) * n_ctx].copy()
            if bos is not None:
                chunk[0] = bos
            with torch.no_grad():
                logits = model(torch.tensor(chunk[None, :], dtype=torch.long)).logits[0]
            logits = logits.float().numpy()[:, :n_vocab]
            for pos in range(n_ctx // 2, n_ctx - 1):
                f.write(encode_row(logits[pos], n_vocab))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--kld", action="append", default=[], help="NAME=BASE")
    parser.add_argument("--skip-checkpoints", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--only", help="with --tiny: this shape alone")
    args = parser.parse_args()
    if args.tiny and args.only:
        if args.only in TINY:
            make_tiny(args.only, TINY[args.only])
        elif args.only in MOE:
            make_tiny_moe(args.only)
        elif args.only == "tiny-gpt-oss":
            make_tiny_gpt_oss(args.only)
        elif args.only == "tiny-gpt-oss-mxfp4":
            make_tiny_gpt_oss_mxfp4()
        else:
            make_tiny_deepseek(args.only)
        return
    if args.tiny:
        for shape, torch_dtype in TINY.items():
            make_tiny(shape, torch_dtype)
        for shape in MOE:
            make_tiny_moe(shape)
        make_tiny_gpt_oss("tiny-gpt-oss")
        make_tiny_gpt_oss_mxfp4()
        for shape in ("tiny-deepseek2", "tiny-deepseek3"):
            make_tiny_deepseek(shape)
        return
    os.makedirs(args.out_dir, exist_ok=True)
    if not args.skip_checkpoints:
        for name in MODELS:
            make_checkpoints(name, args.out_dir)
    for spec in args.kld:
        name, base = spec.split("=", 1)
        for dtype in ("f32", "bf16"):
            checkpoint = os.path.join(args.out_dir, f"{name}-{dtype}")
            write_transformers_base(checkpoint, base,
                                    os.path.join(args.out_dir, f"{name}-{dtype}.transformers.kld"))


if __name__ == "__main__":
    main()
