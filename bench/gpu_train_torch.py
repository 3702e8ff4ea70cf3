#!/usr/bin/env python3
"""The PyTorch peer of bench/gpu_train_bench.cpp: HuggingFace GPT2LMHeadModel (SDPA attention)
trained on one GPU with the same shapes, bf16 autocast over f32 weights, fused AdamW
(betas 0.9/0.95, weight decay 0.1 on matrices), gradient clipping at 1.0, random tokens.
Prints tokens/s, MFU against the same measured peak formula (an 8192^3 bf16 matmul) and
torch.cuda.max_memory_allocated, eager and torch.compile.

    python3 bench/gpu_train_torch.py [--mode eager|compile] [--batch 16]
        [--model gpt2-small|gpt2-medium|gpt2-large|gpt2-xl] [--seq 1024] [--steps 20]
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

# GPT-2's sizes (layers, width, heads), as gpu_train_bench's --model names them.
MODELS = {"gpt2-small": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
          "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}


def measured_peak_tflops():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    best = 1e30
    for i in range(13):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        if i >= 3:
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="eager", choices=["eager", "compile"])
    p.add_argument("--model", default="gpt2-small", choices=sorted(MODELS))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    peak = measured_peak_tflops()
    n_layer, n_embd, n_head = MODELS[a.model]
    cfg = GPT2Config(vocab_size=50257, n_positions=max(1024, a.seq), n_embd=n_embd,
                     n_layer=n_layer, n_head=n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"  # flash attention through SDPA (transformers 4.36+, 5.x)
    model = GPT2LMHeadModel(cfg).cuda().train()
    print(f"attention: {model.config._attn_implementation}", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.mode == "compile" else model
    data = torch.randint(0, 50257, (a.batch, a.seq + 1), device="cuda")
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    flops_per_token = 6 * n_params + 12 * cfg.n_layer * a.seq * cfg.n_embd
    tokens = a.batch * a.seq
    total, timed = 0.0, 0
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=x, labels=y).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        l = loss.item()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            total += dt
            timed += 1
        print(f"step {step:2d} loss {l:.4f} norm {norm.item():.3f} {dt*1e3:.1f} ms "
              f"{tokens/dt:.0f} tok/s", flush=True)
    tok_s = tokens * timed / total
    mfu = tok_s * flops_per_token / (peak * 1e12)
    mem = torch.cuda.max_memory_allocated()
    print(f"pytorch {a.mode} {a.model} batch {a.batch} ({torch.__version__}): "
          f"{tok_s:.0f} tokens/s, "
          f"{total/timed*1e3:.1f} ms/step, MFU {100*mfu:.1f}% of the measured peak "
          f"{peak:.1f} TFLOP/s, max_memory_allocated {mem/2**30:.2f} GiB, {n_params} parameters")
    print(f"RESULT pytorch_{a.mode} tokens_per_s={tok_s:.0f} mfu={mfu:.4f} peak_tflops={peak:.1f} "
          f"max_memory_allocated={mem}")


if __name__ == "__main__":
    main()
