"""PyTorch reference models for braid's parity tests: GPT-2 and LLaMA with exactly the
HuggingFace `transformers` semantics, written in plain torch (no `transformers` here).

Weights are loaded from an HF-layout directory (config.json + model.safetensors). GPT-2 uses
HF's Conv1D layout (weight [in, out], y = x @ W + b); LLaMA uses nn.Linear ([out, in]).
Parameters are kept in a dict keyed by their HF names so gradients come back under the same
names. Computation runs in the dtype given to `load_model` (float64 for golden data)."""

import json
import math
import os

import torch
import torch.nn.functional as F

from safetensors_io import load_file


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


class Gpt2:
    def __init__(self, config, params):
        self.cfg = config
        self.p = params
        self.n_layer = config["n_layer"]
        self.n_head = config["n_head"]
        self.eps = config.get("layer_norm_epsilon", 1e-5)
        act = config.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"unsupported activation_function {act}")

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))

    def conv1d(self, x, name):
        return x @ self.p[name + ".weight"] + self.p[name + ".bias"]

    def layer_norm(self, x, name):
        return F.layer_norm(
            x, (x.shape[-1],), self.p[name + ".weight"], self.p[name + ".bias"], self.eps
        )

    def hidden(self, ids):
        B, T = ids.shape
        p = self.p
        pos = torch.arange(T)
        x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][pos][None]
        C = x.shape[-1]
        NH = self.n_head
        HS = C // NH
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for i in range(self.n_layer):
            h = f"transformer.h.{i}."
            a = self.layer_norm(x, h + "ln_1")
            qkv = self.conv1d(a, h + "attn.c_attn")
            q, k, v = qkv.split(C, dim=-1)
            q = q.view(B, T, NH, HS).transpose(1, 2)
            k = k.view(B, T, NH, HS).transpose(1, 2)
            v = v.view(B, T, NH, HS).transpose(1, 2)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
            att = att.masked_fill(~mask, torch.finfo(att.dtype).min)
            att = torch.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.conv1d(y, h + "attn.c_proj")
            m = self.layer_norm(x, h + "ln_2")
            m = self.gelu_new(self.conv1d(m, h + "mlp.c_fc"))
            x = x + self.conv1d(m, h + "mlp.c_proj")
        return self.layer_norm(x, "transformer.ln_f")

    def head_weight(self):
        if "lm_head.weight" in self.p and not self.cfg.get("tie_word_embeddings", True):
            return self.p["lm_head.weight"]
        return self.p["transformer.wte.weight"]

    def logits(self, ids):
        return self.hidden(ids) @ self.head_weight().t()


class Llama:
    def __init__(self, config, params):
        self.cfg = config
        self.p = params
        self.n_layer = config["num_hidden_layers"]
        self.n_head = config["num_attention_heads"]
        self.n_kv = config.get("num_key_value_heads", self.n_head)
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.theta = config.get("rope_theta", 10000.0)
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"unsupported hidden_act {act}")

    def rms_norm(self, x, name):
        # HF LlamaRMSNorm: statistics in float32 (here: in the compute dtype, >= float32).
        var = x.pow(2).mean(-1, keepdim=True)
        return self.p[name + ".weight"] * (x * torch.rsqrt(var + self.eps))

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def rope(self, T, HS, dtype):
        inv_freq = 1.0 / (
            self.theta ** (torch.arange(0, HS, 2, dtype=torch.int64).to(torch.float64) / HS)
        )
        t = torch.arange(T, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def linear(self, x, name):
        return x @ self.p[name + ".weight"].t()

    def hidden(self, ids):
        B, T = ids.shape
        p = self.p
        x = p["model.embed_tokens.weight"][ids]
        C = x.shape[-1]
        NH, NKV = self.n_head, self.n_kv
        HS = C // NH
        cos, sin = self.rope(T, HS, x.dtype)  # [T, HS]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for i in range(self.n_layer):
            h = f"model.layers.{i}."
            a = self.rms_norm(x, h + "input_layernorm")
            q = self.linear(a, h + "self_attn.q_proj").view(B, T, NH, HS).transpose(1, 2)
            k = self.linear(a, h + "self_attn.k_proj").view(B, T, NKV, HS).transpose(1, 2)
            v = self.linear(a, h + "self_attn.v_proj").view(B, T, NKV, HS).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            # HF repeat_kv: query head j uses kv head j // (NH / NKV).
            k = k.repeat_interleave(NH // NKV, dim=1)
            v = v.repeat_interleave(NH // NKV, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
            att = att.masked_fill(~mask, torch.finfo(att.dtype).min)
            att = torch.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.linear(y, h + "self_attn.o_proj")
            m = self.rms_norm(x, h + "post_attention_layernorm")
            g = self.linear(m, h + "mlp.gate_proj")
            u = self.linear(m, h + "mlp.up_proj")
            x = x + self.linear(F.silu(g) * u, h + "mlp.down_proj")
        return self.rms_norm(x, "model.norm")

    def head_weight(self):
        if self.cfg.get("tie_word_embeddings", False):
            return self.p["model.embed_tokens.weight"]
        return self.p["lm_head.weight"]

    def logits(self, ids):
        return self.hidden(ids) @ self.head_weight().t()


def build_model(config, params):
    kind = config.get("model_type")
    if kind == "gpt2":
        return Gpt2(config, params)
    if kind == "llama":
        return Llama(config, params)
    raise ValueError(f"unsupported model_type {kind!r}")


def load_model(model_dir, dtype=torch.float64, requires_grad=False):
    """Returns (model, params) with params {hf_name: leaf tensor in `dtype`}."""
    config = load_config(model_dir)
    raw = load_file(os.path.join(model_dir, "model.safetensors"))
    params = {}
    for name, t in raw.items():
        if config.get("model_type") == "gpt2" and not name.startswith(("transformer.", "lm_head")):
            name = "transformer." + name  # GPT2Model checkpoints omit the prefix
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # causal-mask buffers of old GPT-2 checkpoints
        params[name] = t.to(dtype).requires_grad_(requires_grad)
    return build_model(config, params), params


def loss_fn(logits, targets):
    """Mean cross-entropy over targets != -100 (HF convention, targets already shifted)."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long(), ignore_index=-100)
