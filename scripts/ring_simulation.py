#!/usr/bin/env python3
"""Projects ring attention to many ranks from the per-step times flashattn-ring measures.

    mpirun -np 2 build/bench/flashattn-ring ... --json w2.json   (likewise w3.json, w4.json)
    python3 scripts/ring_simulation.py w2.json w3.json w4.json [--seqlen 1048576 --memory-gib 256]

The model (docs/distributed.md, "Simulation"): a rank computes at the rate F the slowest rank reached in the
first measured run (its FLOPs over its summed per-step compute time, forward and backward separately). A ring of W
ranks runs W steps; step s computes 1/W of the rank's work, c = flops / (W² F), while the next K/V shard
(backward: also a float32 dK/dV accumulator) crosses the link, t = latency + bytes / bandwidth. A step takes
max(c, t): the transfer is hidden when c ≥ t. The last step has no transfer. The efficiency is the ideal
time flops / (W F) over the modelled time.

It prints: the check of the model against every measured run (measured and predicted time, with the
bandwidth each run's exchange-only transfers reached), then for W = 2 … 1024 ranks and links of
10/25/100/400 Gb/s the step compute and transfer times, whether transfers hide, the efficiency, the memory
per rank, and the largest context that fits in the machines' memory.
"""
import argparse
import json
import math
import statistics


def load(path):
    with open(path) as f:
        run = json.load(f)
    if run.get("mode") != "ring":
        raise SystemExit(f"{path}: not a ring run (mode {run.get('mode')})")
    return run


def element_bytes(dtype):
    return {"f32": 4, "f16": 2, "bf16": 2}[dtype]


def rank_rate(run, name):
    """FLOP/s of a rank in pass `name`: its share of the FLOPs over its summed per-step compute time, for the
    slowest rank (the pass ends with it)."""
    pass_ = next(p for p in run["passes"] if p["name"] == name)
    per_rank_flops = pass_["flops"] / run["world"]
    return min(per_rank_flops / sum(step["compute"] for step in steps) for steps in pass_["steps"])


def link_bandwidth(run):
    """Bytes per second of the exchange-only transfers of a run (None if it had none)."""
    samples = [step["bytes"] / step["alone"] for p in run["passes"] for steps in p["steps"] for step in steps
               if step["alone"] > 0 and step["bytes"] > 0]
    return statistics.median(samples) if samples else None


def pass_flops(shape, name):
    """FLOPs of the whole sequence's pass: 2(d + dv) per visible (row, key) pair and head; backward 2.5×."""
    n = shape["seqlen"]
    pairs = n * (n + 1) / 2 if shape["causal"] else n * n
    forward = 2.0 * shape["batch"] * shape["heads"] * 2 * shape["head_dim"] * pairs
    return forward if name == "forward" else 2.5 * forward


def step_bytes(shape, world, name):
    """Bytes a rank receives per step: the K/V shard; backward adds the float32 dK/dV accumulator."""
    rows = shape["seqlen"] / world
    kv = 2 * shape["batch"] * rows * shape["heads_kv"] * shape["head_dim"]
    received = kv * shape["element"]
    return received + (kv * 4 if name == "backward" else 0)


def model_time(shape, world, name, rate, bandwidth, latency):
    """Modelled time of a pass and its step compute and transfer times."""
    compute = pass_flops(shape, name) / (world * world * rate)
    transfer = latency + step_bytes(shape, world, name) / bandwidth if world > 1 else 0.0
    total = (world - 1) * max(compute, transfer) + compute
    return total, compute, transfer


def memory_per_rank(shape, world, backward):
    """Bytes one rank holds during a call, from the buffers ring_forward and ring_backward allocate."""
    rows = shape["seqlen"] / world
    b, hq, hkv, d, s = shape["batch"], shape["heads"], shape["heads_kv"], shape["head_dim"], shape["element"]
    q_like, kv_like = b * rows * hq * d, b * rows * hkv * d
    inputs = (2 * q_like + 2 * kv_like) * s + b * hq * rows * 4  # q, o, k, v and the LSE
    # float32 queries and running O; two shards in flight; the float32 view of a narrow shard.
    forward = 2 * q_like * 4 + 2 * (2 * kv_like * s) + (2 * kv_like * 4 if s < 4 else 0)
    if not backward:
        return inputs + forward
    # dO and the gradients; float32 q, o, dO and dQ; shards and accumulators in flight, this shard's home.
    grads = (2 * q_like + 2 * kv_like) * s
    return inputs + grads + 4 * q_like * 4 + 2 * (2 * kv_like * s) + 4 * (2 * kv_like * 4) + (2 * kv_like * 4 if s < 4 else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="--json files of flashattn-ring (mode ring); the first sets F")
    parser.add_argument("--seqlen", type=int, help="context length N of the projection (default: the first run's)")
    parser.add_argument("--latency-us", type=float, default=5.0, help="per-message latency of the links")
    parser.add_argument("--memory-gib", type=float, default=256.0, help="memory per machine for the largest context")
    parser.add_argument("--ranks-per-machine", type=int, default=1, help="ranks sharing one machine's memory")
    parser.add_argument("--rate-per-run", action="store_true",
                        help="check each run with its own F (on a machine with fewer cores than ranks, F falls with W)")
    args = parser.parse_args()

    runs = [load(path) for path in args.runs]
    first = runs[0]
    names = [p["name"] for p in first["passes"]]
    rates = {name: rank_rate(first, name) for name in names}

    def shape_of(run, seqlen=None):
        return {"batch": run["batch"], "seqlen": seqlen or run["seqlen"], "heads": run["heads"],
                "heads_kv": run["heads_kv"], "head_dim": run["head_dim"], "causal": run["causal"],
                "element": element_bytes(run["dtype"])}

    print("## Model against the measured runs")
    print(f"F per rank from {args.runs[0]}: " + ", ".join(f"{n} {rates[n] / 1e9:.1f} GFLOP/s" for n in names))
    print("\n| run | W | pass | link (exchange alone) | measured s | predicted s | error |")
    print("|---|---|---|---|---|---|---|")
    for path, run in zip(args.runs, runs):
        bandwidth = link_bandwidth(run) or float("inf")
        for p in run["passes"]:
            rate = rank_rate(run, p["name"]) if args.rate_per_run else rates[p["name"]]
            predicted, _, _ = model_time(shape_of(run), run["world"], p["name"], rate, bandwidth, 0.0)
            print(f"| {path} | {run['world']} | {p['name']} | {bandwidth * 8 / 1e9:.1f} Gb/s | {p['seconds']:.4f} "
                  f"| {predicted:.4f} | {100 * (predicted - p['seconds']) / p['seconds']:+.1f}% |")

    shape = shape_of(first, args.seqlen)
    latency = args.latency_us * 1e-6
    print(f"\n## Projection: N = {shape['seqlen']}, batch {shape['batch']}, Hq {shape['heads']}, Hkv {shape['heads_kv']}, "
          f"d {shape['head_dim']}, {first['dtype']}, {'causal' if shape['causal'] else 'full'}, zigzag")
    links = [10, 25, 100, 400]
    for name in names:
        print(f"\n### {name}: step compute c, step transfer t, efficiency (* = transfer hidden, c ≥ t)")
        print("| W | c ms | " + " | ".join(f"t ms @{g} Gb/s | eff @{g}" for g in links) + " |")
        print("|---|---|" + "---|---|" * len(links))
        world = 2
        while world <= 1024:
            cells = []
            compute = None
            for gbps in links:
                total, compute, transfer = model_time(shape, world, name, rates[name], gbps * 1e9 / 8, latency)
                ideal = pass_flops(shape, name) / (world * rates[name])
                cells.append(f"{1e3 * transfer:.3g} | {100 * ideal / total:.0f}%{'*' if compute >= transfer else ''}")
            print(f"| {world} | {1e3 * compute:.3g} | " + " | ".join(cells) + " |")
            world *= 2

    # The rows per rank L = N/W from which a step hides its transfer: c grows as L², t as L, so one probe
    # length L0 gives the threshold L0 · t(L0) / c(L0).
    print("\n### Hiding threshold: rows per rank L = N/W from which compute covers the transfer (latency ignored)")
    print("| link | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    probe = dict(shape, seqlen=1 << 20)
    for gbps in links:
        cells = []
        for name in names:
            compute = pass_flops(probe, name) / rates[name]
            transfer = step_bytes(probe, 1, name) / (gbps * 1e9 / 8)
            cells.append(f"{probe['seqlen'] * transfer / compute:.0f}")
        print(f"| {gbps} Gb/s | " + " | ".join(cells) + " |")

    backward = "backward" in names
    per_token = memory_per_rank(dict(shape, seqlen=1), 1, backward)
    print(f"\n### Memory and the largest context ({args.memory_gib:g} GiB per machine, "
          f"{args.ranks_per_machine} rank(s) per machine, {'forward + backward' if backward else 'forward'})")
    print("| machines | ranks | memory per rank at N | largest N | time of one pass pair at that N, 100 Gb/s |")
    print("|---|---|---|---|---|")
    machines = 1
    while machines <= 1024:
        world = machines * args.ranks_per_machine
        memory = memory_per_rank(shape, world, backward)
        largest = int(args.memory_gib * 2**30 / args.ranks_per_machine / per_token) * world
        big = dict(shape, seqlen=largest)
        seconds = sum(model_time(big, world, n, rates[n], 100e9 / 8, latency)[0] for n in names)
        print(f"| {machines} | {world} | {memory / 2**30:.2f} GiB | {largest:.3g} | {seconds:.3g} s |")
        machines *= 2


if __name__ == "__main__":
    main()
