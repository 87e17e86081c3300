#!/usr/bin/python3
"""Writes docs/performance.md's results tables from `flashattn bench --json` output.

    scripts/perf_table.py [--doc FILE | --stdout] [--cpu KIND] [RESULTS.jsonl ...]

RESULTS default to docs/perf/*.jsonl (scripts/perf_runs.sh writes one per CPU kind). For each CPU kind, one
table per mode (forward, decode, backward): the case, the CPU, threads, rounds, and medians over the rounds
of the time, the rate and the fraction of the limit: of the FMA peak for forward and backward (each round
against the peak measured in that round), of the roofline for decode (`roofline_fraction`). The fraction's
range over the rounds follows in parentheses. The tables replace what stands between the lines
`<!-- perf-table:begin -->` and `<!-- perf-table:end -->` of the document (default docs/performance.md);
--stdout prints them instead. --cpu names the CPU of rows that no machine line precedes.
"""

import argparse
import glob
import os
import sys

import perf_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- perf-table:begin -->", "<!-- perf-table:end -->"


def three_digits(x):
    """412, 41.2, 4.12, 0.412: three significant digits, no exponent."""
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def percent(case, key):
    """The median fraction as a percentage, with its range over the rounds when there are several."""
    values = sorted(row[key] for row in case.rows if isinstance(row.get(key), (int, float)))
    if not values:
        return "—"
    text = f"{100 * case.median(key):.0f}%"
    if len(values) > 1:
        text += f" ({100 * values[0]:.0f}–{100 * values[-1]:.0f})"
    return text


def table(mode, cases):
    lines = []
    if mode == "decode":
        lines.append("| case | CPU | threads | rounds | median ms | GB/s | GFLOP/s | roofline ms | bound "
                     "| of the roofline | read bandwidth GB/s |")
        lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
        for c in cases:
            lines.append(f"| {perf_results.describe(c.first)} | {c.cpu} | {c.first.get('threads')} | {len(c.rows)} "
                         f"| {three_digits(c.median('median_ms'))} | {three_digits(c.median('gbps'))} "
                         f"| {three_digits(c.median('gflops'))} | {three_digits(c.median('roofline_ms'))} "
                         f"| {c.most_common('roofline_bound') or '—'} | {percent(c, 'roofline_fraction')} "
                         f"| {three_digits(c.median('read_bandwidth_gbps'))} |")
        return lines
    with_baseline = any(c.median("speedup_vs_baseline") is not None for c in cases)
    lines.append("| case | CPU | threads | rounds | median ms | GFLOP/s | FMA peak GFLOP/s | of the FMA peak |"
                 + (" OpenBLAS baseline ms (its kernels) | speedup |" if with_baseline else ""))
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if with_baseline else ""))
    for c in cases:
        line = (f"| {perf_results.describe(c.first)} | {c.cpu} | {c.first.get('threads')} | {len(c.rows)} "
                f"| {three_digits(c.median('median_ms'))} | {three_digits(c.median('gflops'))} "
                f"| {three_digits(c.median('peak_gflops'))} | {percent(c, 'peak_fraction')} |")
        if with_baseline:
            speedup = c.median("speedup_vs_baseline")
            core = c.most_common("baseline_blas_core")
            line += (f" {three_digits(c.median('baseline_median_ms'))}{f' ({core})' if core else ''} | "
                     + (f"{speedup:.2f}× |" if speedup is not None else "— |"))
        lines.append(line)
    return lines


def limits(groups, cpu):
    """The machine's limits over every row of this CPU kind: medians of the values measured in each run."""
    rows = [row for (mode, kind), cases in groups.items() if kind == cpu for c in cases for row in c.rows]

    def median_of(key):
        case = perf_results.Case("", cpu, "", rows)
        return case.median(key)

    parts = []
    if median_of("peak_gflops"):
        parts.append(f"FMA peak {three_digits(median_of('peak_gflops'))} GFLOP/s")
    if median_of("read_bandwidth_gbps"):
        parts.append(f"read bandwidth {three_digits(median_of('read_bandwidth_gbps'))} GB/s")
    if median_of("int8_dot_peak_gops"):
        parts.append(f"int8 dot-product peak {three_digits(median_of('int8_dot_peak_gops'))} GOP/s")
    targets = sorted({row["peak_target"] for row in rows if row.get("peak_target")})
    return parts, targets


def shown(path):
    """A results file's name as the tables cite it: relative to the repository, else its base name."""
    relative = os.path.relpath(os.path.abspath(path), ROOT)
    return os.path.basename(path) if relative.startswith("..") else relative


def render(paths, cpu=None, doc_dir=None):
    groups = perf_results.read(paths, cpu)
    machines = perf_results.machines(paths)
    doc_dir = doc_dir or os.path.join(ROOT, "docs")
    sources = ", ".join(f"`{shown(p)}`" for p in paths)
    out = [BEGIN, f"<!-- Written by scripts/perf_table.py from {sources}: edit those, not these lines. -->", ""]
    for kind in dict.fromkeys(k for _, k in groups):
        machine = machines.get(kind, {})
        heading = f"### {kind}"
        if machine:
            heading += f" ({machine['cpu_name']}, family {machine['family']} model {machine['model']}, "
            heading += f"{machine['cpus']} CPUs)"
        out += [heading, ""]
        parts, targets = limits(groups, kind)
        if parts:
            text = "Limits measured in the same runs (medians): " + ", ".join(parts) + "."
            if targets:
                text += " Highway's dispatched target: " + ", ".join(targets) + "."
            out += [text, ""]
        for mode in perf_results.MODES:
            if (mode, kind) not in groups:
                continue
            out += [f"#### {mode.capitalize()}, {kind}", ""] + table(mode, groups[(mode, kind)]) + [""]
        plot = os.path.join(doc_dir, "perf", f"roofline-{perf_results.slug(kind)}.png")
        if os.path.exists(plot):
            out += [f"![Roofline of the {kind}: each mode's cases against the measured limits]"
                    f"({os.path.relpath(plot, doc_dir)})", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def replace_between_markers(text, block):
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"perf_table.py: the document has no '{BEGIN}' ... '{END}' lines")
    return text[:begin] + block.rstrip("\n") + text[end + len(END):]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", help="JSON-lines files (default docs/perf/*.jsonl)")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    parser.add_argument("--stdout", action="store_true", help="print the tables instead of writing the document")
    parser.add_argument("--cpu", help="the CPU kind of rows that follow no machine line")
    args = parser.parse_args(argv)
    paths = args.results or sorted(glob.glob(os.path.join(ROOT, "docs", "perf", "*.jsonl")))
    if not paths:
        parser.error("no results files given and none in docs/perf/")
    block = render(paths, args.cpu, os.path.dirname(os.path.abspath(args.doc)))
    if args.stdout:
        sys.stdout.write(block)
        return 0
    with open(args.doc, encoding="utf-8") as f:
        text = f.read()
    updated = replace_between_markers(text, block)
    if updated != text:
        with open(args.doc, "w", encoding="utf-8") as f:
            f.write(updated)
    print(f"perf_table.py: {os.path.relpath(args.doc)} {'updated' if updated != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
