#!/usr/bin/env python3
"""Table and SVG for scripts/model-check.sh: medians of the measured runs per configuration,
the cost model's predictions for the same load, and the measured write-cost vs lookup-cost
frontier. usage: model-check.py RESULTS WISCKEY_BIN BUFFER_BYTES SVG_PATH"""
import json
import statistics
import subprocess
import sys

results, binary, buffer, svg_path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = {}
for line in open(results):
    cfg, blob = line.rstrip("\n").split("\t", 1)
    j = json.loads(blob)
    flush, compaction = j["flush_bytes_written"], j["compaction_bytes_written"]
    runs.setdefault(cfg, []).append({
        "wa": (flush + compaction) / flush,
        "probes": j["filter_probes"] / max(1, j["point_lookups"]),
        "fp": j["filter_false_positives"] / max(1, j["point_lookups"]),
        "data": sum(j["level_bytes"]),
        "flush": flush / max(1, j["num_flushes"]),
    })


def model(cfg, data, flush):
    out = subprocess.check_output([binary, "tune", "--writes", "1", "--data_bytes", str(int(data)),
                                   "--write_buffer_size", buffer, "--flush_bytes", str(int(flush)),
                                   "--bloom_bits", "5", "--predict", cfg, "--json"])
    return json.loads(out.decode().strip().splitlines()[-1])


rows = []
print("| configuration | knobs | measured WA | model WA | Δ | Eq 14 as printed | measured filters/lookup | model runs/lookup | Δ | false positives/lookup |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for cfg, rs in runs.items():
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    if cfg == "leveling":
        rows.append((cfg, med, None))
        print(f"| leveling (LevelDB's, not modelled) | – | {med['wa']:.2f} | – | – | – | {med['probes']:.2f} | – | – | {med['fp']:.4f} |")
        continue
    m = model(cfg, med["data"], med["flush"])
    rows.append((cfg, med, m))
    dw = med["wa"] / m["load_write_amp"] - 1
    dr = med["probes"] / m["load_expected_runs"] - 1
    print(f"| {cfg} | {m['knobs']} | {med['wa']:.2f} | {m['load_write_amp']:.2f} | {dw:+.0%} | {m['paper_write_amp']:.2f} "
          f"| {med['probes']:.2f} | {m['load_expected_runs']:.2f} | {dr:+.0%} | {med['fp']:.4f} |")

# Measured frontier: write amplification (x) against filters probed per zero-result lookup (y).
W, H, pad = 640, 420, 60
xs = [r[1]["wa"] for r in rows]
ys = [r[1]["probes"] for r in rows]
xmax, ymax = max(xs) * 1.1, max(ys) * 1.15


def px(x, y):
    return pad + x / xmax * (W - 2 * pad), H - pad - y / ymax * (H - 2 * pad)


pareto = [r for r in rows if not any(o[1]["wa"] <= r[1]["wa"] and o[1]["probes"] <= r[1]["probes"]
                                     and o is not r and (o[1]["wa"], o[1]["probes"]) != (r[1]["wa"], r[1]["probes"])
                                     for o in rows)]
pareto.sort(key=lambda r: r[1]["wa"])
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{pad}" y1="{H-pad}" x2="{W-pad}" y2="{H-pad}" stroke="black"/>',
       f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{H-pad}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-20}" text-anchor="middle">write amplification (flush + compaction bytes / flush bytes), measured</text>',
       f'<text x="18" y="{H/2}" text-anchor="middle" transform="rotate(-90 18 {H/2})">filters probed per zero-result lookup, measured</text>',
       f'<text x="{W/2}" y="24" text-anchor="middle" font-size="13">Wacky continuum: measured write cost vs lookup cost (line: Pareto frontier)</text>']
for i in range(6):
    x, y = xmax * i / 5, ymax * i / 5
    gx, _ = px(x, 0)
    _, gy = px(0, y)
    svg.append(f'<text x="{gx}" y="{H-pad+15}" text-anchor="middle">{x:.0f}</text>')
    svg.append(f'<text x="{pad-6}" y="{gy+4}" text-anchor="end">{y:.0f}</text>')
pts = " ".join("%.1f,%.1f" % px(r[1]["wa"], r[1]["probes"]) for r in pareto)
svg.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
for cfg, med, m in rows:
    x, y = px(med["wa"], med["probes"])
    color = "#d62728" if m is None else "#1f77b4"
    svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
    svg.append(f'<text x="{x+6:.1f}" y="{y-6:.1f}">{cfg}</text>')
svg.append("</svg>")
open(svg_path, "w").write("\n".join(svg) + "\n")
print(f"\nfrontier: {svg_path}")
