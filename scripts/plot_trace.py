#!/usr/bin/env python3
"""Draws a window of an XTPU_TRACE file (Chrome trace-event JSON) as a timeline PNG: one row per
thread, spans nested by depth, coloured by category, the widest named. For the docs; Perfetto
(ui.perfetto.dev) or chrome://tracing show the same file interactively.

Usage: plot_trace.py TRACE.json OUT.png [--step N] [--steps K]
  the window starts at the N-th "step" span (default 100) and covers K steps (default 1).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"step": "#9aa7b1", "compile": "#d62728", "execute": "#c7d3dd", "kernel": "#1f77b4",
           "transfer": "#2ca02c", "loader": "#ff7f0e", "pool": "#8c564b", "sync": "#000000"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    steps = sorted((e for e in events if e.get("name") == "step"), key=lambda e: e["ts"])
    first = steps[min(a.step, len(steps) - 1)]
    last = steps[min(a.step + a.steps - 1, len(steps) - 1)]
    t0, t1 = first["ts"], last["ts"] + last["dur"]
    pad = 0.05 * (t1 - t0)
    t0, t1 = t0 - pad, t1 + pad
    spans = [e for e in events if e.get("ph") == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0]
    tracks = sorted({(e["pid"], e["tid"]) for e in spans})
    fig, ax = plt.subplots(figsize=(13, 1.2 + 1.1 * len(tracks)))
    for row, track in enumerate(tracks):
        mine = sorted((e for e in spans if (e["pid"], e["tid"]) == track), key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in mine:
            while open_ends and e["ts"] >= open_ends[-1]:
                open_ends.pop()
            depth = len(open_ends)
            open_ends.append(e["ts"] + e["dur"])
            y = row * 5 + depth
            b, end = max(e["ts"], t0), min(e["ts"] + e["dur"], t1)  # clipped to the window
            x0, w = (b - t0) / 1000, (end - b) / 1000
            ax.broken_barh([(x0, w)], (y, 0.9), facecolors=COLOURS.get(e["cat"], "#8c564b"), edgecolor="white", linewidth=0.3)
            if w > 0.0045 * len(e["name"]) * (t1 - t0) / 1000:  # label what the name fits in
                ax.text(x0 + w / 2, y + 0.45, e["name"], ha="center", va="center", fontsize=7, clip_on=True)
    for e in events:
        if e.get("ph") == "i" and t0 <= e["ts"] <= t1 and (e["pid"], e["tid"]) in tracks:
            row = tracks.index((e["pid"], e["tid"]))
            ax.plot([(e["ts"] - t0) / 1000] * 2, [row * 5, row * 5 + 4], color="black", linewidth=1)
    ax.set_xlim(0, (t1 - t0) / 1000)
    ax.set_yticks([row * 5 + 1 for row in range(len(tracks))])
    ax.set_yticklabels([f"{process.get(p, p)} / thread {t}" for p, t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(f"{os.path.basename(a.trace)}: step {a.step}" + (f" to {a.step + a.steps - 1}" if a.steps > 1 else ""))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, COLOURS.keys(), loc="upper right", fontsize=7, ncol=len(COLOURS))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
