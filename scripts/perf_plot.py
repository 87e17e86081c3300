#!/usr/bin/python3
"""Draws the roofline of docs/performance.md from `flashattn bench --json` output (matplotlib, Debian's
python3-matplotlib; no display needed).

    scripts/perf_plot.py [--out-dir DIR] [--cpu KIND] [RESULTS.jsonl ...]

RESULTS default to docs/perf/*.jsonl. For each CPU kind it writes DIR/roofline-<kind>.png (DIR default
docs/perf): every case as a point, arithmetic intensity (FLOP per byte) against the achieved GFLOP/s (medians
over its rounds), under the roofs of the limits measured in the same runs (medians): the FMA peak and the int8
dot-product peak, each capped by the read bandwidth times the intensity. A decode case's bytes are those its
call must read (`bytes_read`: the cache, its scales, q and o); a forward or backward case's are the tensors it
takes and returns (`tensor_bytes`), the least traffic such a call can have, so that those points sit at the
intensity of the problem, not of the kernel's tiling. FLOPs count as in the bench (causal: half).
"""

import argparse
import glob
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

import perf_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABEL_OFFSETS = ((6, 3), (6, -10), (-16, 3), (-16, -10), (6, 14), (-16, 14), (6, -21), (-16, -21), (18, 3), (-28, 3))
MARKERS = {"forward": ("o", "tab:blue"), "decode": ("s", "tab:red"), "backward": ("^", "tab:green")}


def point(case):
    """(intensity in FLOP/byte, GFLOP/s), medians over the case's rounds; None without the bytes."""
    flops = case.median("gflops") * case.median("median_ms") * 1e6
    bytes_ = case.median("bytes_read") if case.mode == "decode" else case.median("tensor_bytes")
    if not flops or not bytes_:
        return None
    return flops / bytes_, case.median("gflops")


def plot(kind, groups, machine, out):
    cases = [c for mode in perf_results.MODES for c in groups.get((mode, kind), [])]
    everything = perf_results.Case("", kind, "", [row for c in cases for row in c.rows])
    fma, bandwidth, int8 = (everything.median(k) for k in ("peak_gflops", "read_bandwidth_gbps", "int8_dot_peak_gops"))
    points = [(c, point(c)) for c in cases]
    points = [(c, p) for c, p in points if p]
    if not points:
        return False

    fig, ax = plt.subplots(figsize=(8, 6.5), dpi=100)
    xs = [p[0] for _, p in points]
    lo, hi = min(xs + [1.0]) / 2, max(xs + [fma / bandwidth if fma and bandwidth else 1.0]) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if bandwidth:
        for peak, label, style in ((fma, "FMA peak", "-"), (int8, "int8 dot-product peak", "--")):
            if peak:
                ax.plot(grid, [min(peak, bandwidth * x) for x in grid], style, color="black", linewidth=1.2,
                        label=f"{label} {peak:.0f} GOP/s, read bandwidth {bandwidth:.1f} GB/s")
    else:
        for peak, label, style in ((fma, "FMA peak", "-"), (int8, "int8 dot-product peak", "--")):
            if peak:
                ax.axhline(peak, linestyle=style, color="black", linewidth=1.2, label=f"{label} {peak:.0f} GOP/s")
    placed = []
    for number, (case, (x, y)) in enumerate(points, 1):
        marker, color = MARKERS[case.mode]
        ax.plot([x], [y], marker, color=color, markersize=7,
                label=f"{number}. {case.mode}: {perf_results.describe(case.first)}")
        # Points closer than about a seventh of a decade share a spot: their numbers go round it.
        near = sum(1 for px, py in placed if abs(math.log10(px / x)) < 0.15 and abs(math.log10(py / y)) < 0.15)
        placed.append((x, y))
        ax.annotate(str(number), (x, y), textcoords="offset points", xytext=LABEL_OFFSETS[near % len(LABEL_OFFSETS)],
                    fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte: decode of the bytes it reads, forward and backward of "
                  "their tensors)", fontsize=8)
    ax.set_ylabel("GFLOP/s, integer operations included (medians over the rounds)", fontsize=9)
    title = f"flashattn bench on {kind}"
    if machine:
        title += f" ({machine['cpu_name']}, {machine['cpus']} CPUs)"
    threads = sorted({c.first.get("threads") for c, _ in points if c.first.get("threads")})
    if threads:
        title += f", {'/'.join(map(str, threads))} threads"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.savefig(out, bbox_inches="tight", metadata={"Software": None})  # no version in the file: regenerating changes only data
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", help="JSON-lines files (default docs/perf/*.jsonl)")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "perf"))
    parser.add_argument("--cpu", help="the CPU kind of rows that follow no machine line")
    args = parser.parse_args(argv)
    paths = args.results or sorted(glob.glob(os.path.join(ROOT, "docs", "perf", "*.jsonl")))
    if not paths:
        parser.error("no results files given and none in docs/perf/")
    groups = perf_results.read(paths, args.cpu)
    machines = perf_results.machines(paths)
    os.makedirs(args.out_dir, exist_ok=True)
    for kind in dict.fromkeys(k for _, k in groups):
        out = os.path.join(args.out_dir, f"roofline-{perf_results.slug(kind)}.png")
        if plot(kind, groups, machines.get(kind), out):
            print(f"perf_plot.py: {os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
