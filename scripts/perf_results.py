#!/usr/bin/python3
"""The results of `flashattn bench --json`, grouped for docs/performance.md's tables and roofline plot.

perf_table.py and perf_plot.py import this module; scripts/perf_runs.sh runs it for the machine line:

    scripts/perf_results.py machine        print this machine's line: {"machine": true, "cpu_kind": ...}
    scripts/perf_results.py slug FILE      print the CPU kind of FILE's machine line as a file name stem

A results file holds JSON lines: a machine line (written by perf_runs.sh; it names the CPU of the rows after
it), the bench's rows (one per case and round) and its summaries (`"summary": true`, with --rounds R > 1).
Lines that are not JSON objects are skipped. The summaries are not read: every median here is taken over the
rows of a case, so that one round, several rounds and several files give the same kind of figure.
"""

import json
import re
import statistics
import sys
from dataclasses import dataclass, field

MODES = ("forward", "decode", "backward")

# CPU kinds by (vendor, family, model): the microarchitecture names the docs use.
_AMD_FAMILY_25 = (  # family 19h: Zen 3 and Zen 4 share it, by model range
    (range(0x00, 0x10), "Zen 3"), (range(0x10, 0x20), "Zen 4"), (range(0x20, 0x60), "Zen 3"),
    (range(0x60, 0x80), "Zen 4"), (range(0xA0, 0xB0), "Zen 4"))
_INTEL_FAMILY_6 = {0x55: "Skylake-SP", 0x6A: "Ice Lake-SP", 0x6C: "Ice Lake-SP", 0x8F: "Sapphire Rapids",
                   0xCF: "Emerald Rapids", 0xAD: "Granite Rapids"}


def cpu_kind(vendor, family, model):
    """The microarchitecture of a CPU from its cpuid vendor, family and model, or a plain description."""
    if vendor == "AuthenticAMD":
        if family == 23:
            return "Zen 2" if model >= 0x30 else "Zen"
        if family == 25:
            for models, kind in _AMD_FAMILY_25:
                if model in models:
                    return kind
        if family == 26:
            return "Zen 5"
    if vendor == "GenuineIntel" and family == 6 and model in _INTEL_FAMILY_6:
        return _INTEL_FAMILY_6[model]
    return f"{vendor} family {family} model {model}"


def this_machine(cpuinfo="/proc/cpuinfo"):
    """This machine's line: its CPU kind and what /proc/cpuinfo says of its first CPU."""
    fields = {}
    cpus = 0
    with open(cpuinfo, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "processor":
                cpus += 1
            elif key and key not in fields:
                fields[key] = value
    vendor = fields.get("vendor_id", "unknown")
    family, model = int(fields.get("cpu family", "0")), int(fields.get("model", "0"))
    return {"machine": True, "cpu_kind": cpu_kind(vendor, family, model), "cpu_name": fields.get("model name", ""),
            "vendor": vendor, "family": family, "model": model, "cpus": cpus}


def slug(text):
    """A file name stem: 'Zen 5' -> 'zen5'."""
    return re.sub(r"[^a-z0-9]+", "", text.lower()) or "unknown"


@dataclass
class Case:
    """One bench case on one CPU kind: its rows, one per round (over every file given)."""
    mode: str
    cpu: str
    name: str
    rows: list = field(default_factory=list)

    def median(self, key):
        values = [row[key] for row in self.rows if isinstance(row.get(key), (int, float))]
        return statistics.median(values) if values else None

    def most_common(self, key):
        values = [row[key] for row in self.rows if row.get(key) is not None]
        return max(set(values), key=values.count) if values else None

    @property
    def first(self):
        return self.rows[0]


def read(paths, cpu=None):
    """Cases by (mode, CPU kind), in the order their first rows appear. `cpu` names the CPU of rows that
    follow no machine line (else 'unknown CPU')."""
    cases = {}
    for path in paths:
        machine = cpu
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if row.get("machine"):
                    machine = cpu or row.get("cpu_kind")
                    continue
                if row.get("summary") or row.get("mode") not in MODES or "median_ms" not in row:
                    continue
                kind = row.get("cpu_kind") or machine or "unknown CPU"
                key = (row["mode"], kind, row["name"], row.get("threads"))
                cases.setdefault(key, Case(row["mode"], kind, row["name"])).rows.append(row)
    grouped = {}
    for case in cases.values():
        grouped.setdefault((case.mode, case.cpu), []).append(case)
    return grouped


def machines(paths):
    """The machine lines of the files, by CPU kind (the last one of each kind)."""
    found = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith('{"machine"'):
                    row = json.loads(line)
                    found[row["cpu_kind"]] = row
    return found


def describe(row):
    """A short description of a case from its row, e.g. 'b1 h8 N4096 d128 f32 causal' or
    'Hq32 Hkv8 N32768 d128 int8 cache (f16 q), integer scores + P̃V'."""
    dtype = row.get("dtype")
    if row["mode"] != "decode":
        heads = f"h{row['heads']}" if row["heads"] == row["heads_kv"] else f"Hq{row['heads']} Hkv{row['heads_kv']}"
        n = f"N{row['seqlen_q']}" if row["seqlen_q"] == row["seqlen_k"] else f"Nq{row['seqlen_q']} Nk{row['seqlen_k']}"
        text = f"b{row['batch']} {heads} {n} d{row['headdim']} {dtype}"
        return text + (" causal" if row.get("causal") else "")
    batch = f"b{row['batch']} " if row["batch"] != 1 else ""
    keys = (f"N{row['cache_len_min']}–{row['cache_len_max']}" if "cache_len_min" in row else f"N{row['cache_len']}")
    dims = f"d{row['headdim']}"
    match = re.search(r"_dv(\d+)", row["name"])
    if match:
        dims += f"/{match.group(1)}"
    nq = f" Nq{row['seqlen_q']}" if row["seqlen_q"] != 1 else ""
    text = f"{batch}Hq{row['heads']} Hkv{row['heads_kv']}{nq} {keys} {dims}"
    cache = row.get("cache_dtype", dtype)
    if cache == dtype:
        text += f" {cache}"
    else:
        text += f" {cache} cache ({dtype} q)"
    if row.get("scale_group_size"):
        text += f" g{row['scale_group_size']}"
    elif cache in ("int8", "fp8_e4m3", "fp8_e5m2") and row.get("scale_granularity"):
        text += f" per {row['scale_granularity'].replace('per_', '').replace('_', ' ')}"
    integer = [what for key, what in (("quantize_query_int8", "scores"), ("quantize_probs_u8", "P̃V")) if row.get(key)]
    if integer:
        text += ", integer " + " + ".join(integer)
    if row.get("page_size"):
        text += f", pages of {row['page_size']}"
    return text


def main(argv):
    if len(argv) == 2 and argv[1] == "machine":
        print(json.dumps(this_machine()))
        return 0
    if len(argv) == 3 and argv[1] == "slug":
        kinds = list(machines([argv[2]]))
        print(slug(kinds[-1] if kinds else "unknown"))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
