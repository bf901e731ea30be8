#!/usr/bin/env python3
"""Renders a Strata trace (STRATA_TRACE / train_gpt --trace) as a PNG timeline: one row per rank and track
(compute, all_gather, reduce_scatter), one bar per span, colour by kind. Needs matplotlib (Debian:
python3-matplotlib; run with /usr/bin/python3).

Usage: /usr/bin/python3 scripts/plot_trace.py TRACE.json OUT.png [--from-ms A] [--to-ms B]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_files import ScriptError, fail, read_input_file  # noqa: E402

COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#e377c2", "all_gather": "#dd8452",
           "reduce_scatter": "#8172b3", "all_reduce": "#937860", "wait": "#d62728"}
TRACKS = ["compute", "all_gather", "reduce_scatter"]


def colour(name):
    for key, c in COLOURS.items():
        if name.startswith(key):
            return c
    return "#999999"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-ms", type=float, default=None)
    ap.add_argument("--to-ms", type=float, default=None)
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    try:  # through the checked reader: a FIFO or a device is refused instead of blocking
        events = json.loads(read_input_file(a.trace, "trace", 4 << 30))["traceEvents"]
    except (ScriptError, ValueError, KeyError, TypeError) as e:
        fail("plot_trace.py", str(e) if isinstance(e, ScriptError) else f"{a.trace} is not a Chrome trace: {e}")
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X" and names.get((e["pid"], e["tid"])) in TRACKS]
    lo = a.from_ms * 1000 if a.from_ms is not None else min(e["ts"] for e in spans)
    hi = a.to_ms * 1000 if a.to_ms is not None else max(e["ts"] + e["dur"] for e in spans)
    ranks = sorted({e["pid"] for e in spans})
    rows = [(r, t) for r in ranks for t in TRACKS]
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(rows) + 1.2))
    # Longest spans first, so nested ones (a block's forward inside the embeddings unit's) are drawn on top.
    spans.sort(key=lambda e: -e["dur"])
    for y, (r, t) in enumerate(rows):
        for e in spans:
            if e["pid"] != r or names[(e["pid"], e["tid"])] != t or e["ts"] + e["dur"] < lo or e["ts"] > hi:
                continue
            nested = e["dur"] < 0.5 * (hi - lo) and t == "compute"
            ax.barh(y, e["dur"] / 1000, left=(e["ts"] - lo) / 1000, height=0.7 if nested else 0.85,
                    color=colour(e["name"]), edgecolor="white", linewidth=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {r} {t}" for r, t in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, (hi - lo) / 1000)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(rows) < 8 else -0.12),
              ncol=len(COLOURS), fontsize=8, frameon=False)
    ax.set_title(a.title or f"Strata trace: {a.trace}")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}: {len(spans)} spans, {len(ranks)} ranks, {(hi - lo) / 1000:.1f} ms")


if __name__ == "__main__":
    main()
