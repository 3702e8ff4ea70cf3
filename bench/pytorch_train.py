#!/usr/bin/python3
"""PyTorch peer for braid's training benchmarks: GPT-2 style model, random tokens, AdamW.

Single process:   pytorch_train.py --steps 10
Data parallel:    pytorch_train.py --ddp --world 2 --steps 10   (spawns gloo DDP ranks)
ZeRO-1:           pytorch_train.py --zero1 --world 2 --steps 10 (DDP + ZeroRedundancyOptimizer)
Mixed precision:  pytorch_train.py --precision bf16 [--ddp ...]
Prints one line: `pytorch tokens_per_s=<x> step_ms=<y> peak_rss_mib=<z> threads=<n> ...`, with
peak_rss_mib rank 0's peak resident set.
Precision: fp32 (default) everywhere; bf16/fp16 the way PyTorch users do it on CPU: fp32
parameters, gradients and AdamW state, torch.autocast("cpu", dtype) around forward and loss,
backward outside it; fp16 adds a GradScaler. CPU autocast in torch 1.13 (Debian 12's
python3-torch) takes only bfloat16, so there --precision fp16 stops with a message.
Model: vocab V, T positions, L layers, NH heads, C channels; tied LM head; GELU tanh; LayerNorm.
"""
import argparse
import contextlib
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13 (Debian 12): explicit causal softmax attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, NH, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2 init, as braid does
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


AUTOCAST_DTYPE = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision):
    """Raises SystemExit naming the torch version when its CPU autocast lacks the dtype."""
    dtype = AUTOCAST_DTYPE[precision]
    if dtype is None:
        return
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # torch 1.13 warns and disables an fp16 CPU autocast; entering it then raises
            with torch.autocast("cpu", dtype=dtype):
                ok = torch.is_autocast_cpu_enabled() and torch.get_autocast_cpu_dtype() == dtype
        except RuntimeError:
            ok = False
    if not ok:
        why = "; ".join(" ".join(str(w.message).split()) for w in caught)
        raise SystemExit(f"pytorch_train.py: --precision {precision}: torch {torch.__version__} "
                         f"CPU autocast does not support {dtype}" + (f" ({why})" if why else ""))
    if precision == "fp16" and make_grad_scaler() is None:
        raise SystemExit(f"pytorch_train.py: --precision fp16: torch {torch.__version__} has no "
                         "CPU GradScaler (torch.amp.GradScaler('cpu'))")


def make_grad_scaler():
    """The CPU loss scaler fp16 needs (torch.amp.GradScaler("cpu")), or None where absent."""
    try:
        return torch.amp.GradScaler("cpu")
    except (AttributeError, TypeError, RuntimeError):
        return None


def run(args, rank=0, world=1):
    torch.manual_seed(1234 + rank)
    torch.set_num_threads(args.threads)
    model = GPT(args.vocab, args.seq, args.layers, args.heads, args.dim)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    if world > 1 and args.zero1:
        # ZeRO-1: each rank keeps AdamW state for its shard of the parameters and broadcasts
        # its updated shard after step(). parameters_as_bucket_view (torch >= 1.9) packs the
        # parameters into flat per-device buckets, so the broadcasts are a few large ones.
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      parameters_as_bucket_view=True, lr=1e-4, weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    dtype = AUTOCAST_DTYPE[args.precision]
    scaler = make_grad_scaler() if args.precision == "fp16" else None
    B = args.batch // world
    g = torch.Generator().manual_seed(99 + rank)
    times = []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, args.vocab, (B, args.seq), generator=g)
        tgt = torch.randint(0, args.vocab, (B, args.seq), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext():
            loss = model(idx, tgt)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        times.append(time.perf_counter() - t0)
    steady = times[args.warmup:]
    step_s = sorted(steady)[len(steady) // 2]  # median
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    tps = args.batch * args.seq / step_s
    if rank == 0:
        print(f"pytorch tokens_per_s={tps:.1f} step_ms={step_s * 1e3:.1f} "
              f"peak_rss_mib={rss:.1f} threads={args.threads} world={world} "
              f"zero1={int(world > 1 and args.zero1)} precision={args.precision} "
              f"torch={torch.__version__} "
              f"loss={loss.item():.4f}", flush=True)


def ddp_worker(rank, args):
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    run(args, rank, args.world)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--zero1", action="store_true",  # implies --ddp
                   help="DDP + ZeroRedundancyOptimizer(AdamW): optimizer state sharded")
    p.add_argument("--precision", choices=sorted(AUTOCAST_DTYPE), default="fp32",
                   help="bf16/fp16: CPU autocast around forward and loss, fp32 params and AdamW")
    args = p.parse_args()
    args.ddp = args.ddp or args.zero1
    check_precision(args.precision)
    if args.ddp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        torch.multiprocessing.spawn(ddp_worker, args=(args,), nprocs=args.world)
    else:
        run(args)


if __name__ == "__main__":
    main()
