"""Writes the golden parity data under testdata/<name>/:
  config.json        HF config
  model.safetensors  random weights (HF names and layout, float32)
  golden.safetensors input_ids [B,T] i32, targets [B,T] i32 (one -100 = ignored), loss [1],
                     logits [B,T,V], and grad.<hf name> for every parameter (HF layout),
                     all computed by tools/reference.py in float64 and stored as float32.

Run: /usr/bin/python3 tools/make_golden.py [testdata_dir]"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from safetensors_io import save_file  # noqa: E402

GPT2_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 96,
    "embd_pdrop": 0.1,
    "eos_token_id": 96,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 16,
    "n_embd": 32,
    "n_head": 4,
    "n_inner": None,
    "n_layer": 2,
    "n_positions": 16,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.1,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 97,
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 8,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 101,
}


def gpt2_weights(cfg, g):
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    w = {}

    def rnd(*shape, std=0.2):
        return torch.randn(*shape, generator=g) * std

    w["transformer.wte.weight"] = rnd(V, C, std=0.2)
    w["transformer.wpe.weight"] = rnd(P, C, std=0.1)
    for i in range(L):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[h + ln + ".weight"] = 1.0 + rnd(C, std=0.1)
            w[h + ln + ".bias"] = rnd(C, std=0.1)
        # HF Conv1D layout: [in, out].
        w[h + "attn.c_attn.weight"] = rnd(C, 3 * C)
        w[h + "attn.c_attn.bias"] = rnd(3 * C, std=0.1)
        w[h + "attn.c_proj.weight"] = rnd(C, C)
        w[h + "attn.c_proj.bias"] = rnd(C, std=0.1)
        w[h + "mlp.c_fc.weight"] = rnd(C, 4 * C)
        w[h + "mlp.c_fc.bias"] = rnd(4 * C, std=0.1)
        w[h + "mlp.c_proj.weight"] = rnd(4 * C, C, std=0.1)
        w[h + "mlp.c_proj.bias"] = rnd(C, std=0.1)
    w["transformer.ln_f.weight"] = 1.0 + rnd(C, std=0.1)
    w["transformer.ln_f.bias"] = rnd(C, std=0.1)
    return w


def llama_weights(cfg, g):
    C, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H = cfg["intermediate_size"]
    HS = C // cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"] * HS
    w = {}

    def rnd(*shape, std=0.2):
        return torch.randn(*shape, generator=g) * std

    w["model.embed_tokens.weight"] = rnd(V, C, std=0.5)
    for i in range(L):
        h = f"model.layers.{i}."
        w[h + "self_attn.q_proj.weight"] = rnd(C, C)
        w[h + "self_attn.k_proj.weight"] = rnd(KV, C)
        w[h + "self_attn.v_proj.weight"] = rnd(KV, C)
        w[h + "self_attn.o_proj.weight"] = rnd(C, C)
        w[h + "mlp.gate_proj.weight"] = rnd(H, C)
        w[h + "mlp.up_proj.weight"] = rnd(H, C)
        w[h + "mlp.down_proj.weight"] = rnd(C, H, std=0.1)
        w[h + "input_layernorm.weight"] = 1.0 + rnd(C, std=0.1)
        w[h + "post_attention_layernorm.weight"] = 1.0 + rnd(C, std=0.1)
    w["model.norm.weight"] = 1.0 + rnd(C, std=0.1)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rnd(V, C)
    return w


def make(out_dir, name, cfg, weights_fn, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    weights = weights_fn(cfg, g)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    save_file(weights, os.path.join(d, "model.safetensors"), {"format": "pt"})

    V = cfg["vocab_size"]
    ids = torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)
    targets[1, 2] = -100  # one ignored position: the mean runs over counted targets only

    model, params = reference.load_model(d, torch.float64, requires_grad=True)
    logits = model.logits(ids.long())
    loss = reference.loss_fn(logits, targets)
    loss.backward()

    golden = {
        "input_ids": ids,
        "targets": targets,
        "loss": loss.detach().reshape(1).float(),
        "logits": logits.detach().float(),
    }
    for pname in weights:
        golden["grad." + pname] = params[pname].grad.float()
    save_file(golden, os.path.join(d, "golden.safetensors"))
    print(f"{name}: loss {loss.item():.8f}, {len(weights)} tensors")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "testdata")
    make(out_dir, "gpt2-tiny", GPT2_CONFIG, gpt2_weights, B=2, T=8, seed=1234)
    make(out_dir, "llama-tiny", LLAMA_CONFIG, llama_weights, B=2, T=8, seed=5678)


if __name__ == "__main__":
    main()
