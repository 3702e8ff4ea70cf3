"""Checks a braid-exported HF model directory against the PyTorch reference.

  /usr/bin/python3 tools/check_export.py MODEL_DIR GOLDEN [--rtol 1e-5]

MODEL_DIR holds config.json + model.safetensors as braid exported them; GOLDEN is a
safetensors file with input_ids [B,T] i32, targets [B,T] i32 and loss [1] (and optionally
logits [B,T,V]). The reference loads the directory with HF naming/layout, computes the loss
on the same tokens, prints both, and exits 1 when they differ by more than rtol (relative).
Exit status 77 means "skipped": torch is not importable."""

import argparse
import os
import sys

try:
    import torch
except ImportError:  # pragma: no cover
    print("check_export: torch not available, skipping")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from safetensors_io import load_file  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("golden")
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()

    golden = load_file(args.golden)
    model, _ = reference.load_model(args.model_dir, torch.float64)
    with torch.no_grad():
        logits = model.logits(golden["input_ids"].long())
        loss = reference.loss_fn(logits, golden["targets"]).item()
    want = golden["loss"].double().item()
    rel = abs(loss - want) / max(abs(want), 1e-12)
    print(f"reference loss {loss:.9f}  braid loss {want:.9f}  rel err {rel:.3e}")
    ok = rel <= args.rtol
    if "logits" in golden:
        g = golden["logits"].double()
        err = ((logits - g).abs().max() / g.abs().max().clamp_min(1e-12)).item()
        print(f"logits max abs err / max |logit| {err:.3e}")
        ok = ok and err <= 1e-4
    if not ok:
        print("check_export: MISMATCH", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
