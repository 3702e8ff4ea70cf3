#!/usr/bin/env python3
"""The big-model bench's plot (bench/big_models.sh): MFU and tokens/s against parameters, one
point per model, as an SVG with no library beyond Python's own.

    tools/plot_big_models.py ROWS.tsv OUT.svg     # rows: name, parameters, tokens/s, MFU (0-1)
"""
import math
import sys


def main(rows_path, out_path):
    rows = []
    for line in open(rows_path):
        name, params, tps, mfu = line.rstrip("\n").split("\t")
        rows.append((name, float(params), float(tps), float(mfu)))
    if not rows:
        sys.exit(f"{rows_path}: no rows to plot")
    rows.sort(key=lambda r: r[1])
    w, h, left, right, top, bottom = 720, 300, 60, 20, 30, 50
    panels = [("MFU (% of the calibrated bf16 GEMM peak)", [100 * r[3] for r in rows]),
              ("tokens/s", [r[2] for r in rows])]
    lo, hi = math.log10(min(r[1] for r in rows) / 1.3), math.log10(max(r[1] for r in rows) * 1.3)
    pw = (w - left - right) / 2 - 20

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    colors = {"gpt2": "#1f77b4", "llama": "#d62728"}
    for i, (title, ys) in enumerate(panels):
        x0 = left + i * (pw + 60)
        ymax = max(ys) * 1.2
        x = lambda p: x0 + (math.log10(p) - lo) / (hi - lo) * pw
        y = lambda v: h - bottom - v / ymax * (h - top - bottom)
        out.append(f'<text x="{x0}" y="{top - 10}" font-weight="bold">{title}</text>')
        out.append(f'<line x1="{x0}" y1="{h - bottom}" x2="{x0 + pw}" y2="{h - bottom}" stroke="black"/>')
        out.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{h - bottom}" stroke="black"/>')
        for k in range(5):
            v = ymax * k / 4
            out.append(f'<text x="{x0 - 5}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
            out.append(f'<line x1="{x0}" y1="{y(v)}" x2="{x0 + pw}" y2="{y(v)}" stroke="#ddd"/>')
        for tick in (1e8, 2e8, 5e8, 1e9, 2e9, 5e9):
            if lo <= math.log10(tick) <= hi:
                label = f"{tick / 1e9:g}B" if tick >= 1e9 else f"{tick / 1e6:g}M"
                out.append(f'<text x="{x(tick):.1f}" y="{h - bottom + 14}" text-anchor="middle">{label}</text>')
        # One line per family (GPT-2, LLaMA), each point named.
        for family in sorted({r[0].split("-")[0] for r in rows}):
            color = colors.get(family, "#2ca02c")
            mine = [(r, v) for r, v in zip(rows, ys) if r[0].split("-")[0] == family]
            pts = " ".join(f"{x(r[1]):.1f},{y(v):.1f}" for r, v in mine)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
            for r, v in mine:
                out.append(f'<circle cx="{x(r[1]):.1f}" cy="{y(v):.1f}" r="4" fill="{color}"/>')
                out.append(f'<text x="{x(r[1]):.1f}" y="{y(v) - 8:.1f}" text-anchor="middle" '
                           f'font-size="9" fill="{color}">{r[0]}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{h - 12}" text-anchor="middle">parameters</text>')
    out.append("</svg>")
    open(out_path, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
