#!/usr/bin/env python3
"""Reads train_gpt pipeline traces and logs for scripts/bench_pipeline.sh: bubble share, 1F1B timeline, throughput.

Subcommands (standard library only):
  bubble TRACE... --pp P --microbatches M [--virtual V] [--skip 2] [--label L]
      one Markdown row: mean idle share of a step over ranks, traces and steps >= skip, and the median step's,
      beside (P-1)/(V*M+P-1)
  timeline TRACE [--step 3]
      fixed-column table, per rank, of the order and start/end (ms from the step's start) of each F/B action
  throughput LOG... [--skip 2] [--label L] [--rows R]
      one Markdown row from train_gpt logs: mean tok/s and step ms of steps >= skip, peak memory per rank

How the trace is read (train_gpt --trace, Chrome-trace JSON of all ranks):
  * a rank is a pid, named "rank N" by a process_name record; tracks are tids named by thread_name records, and the
    tid of a track differs between ranks, so tracks are matched by name, never by tid;
  * an action is a complete ("X") event of category "pipeline" on track "pipeline", named F<mb>@s<stage> or
    B<mb>@s<stage>; the span covers the stage's compute (and any parameter all-gather it waits on), not the
    activation send/recv, which the executor does between actions (category "comm", name batch_send_recv);
  * steps: the actions carry no step number, so each rank's actions are split at the starts of that rank's
    "optimizer step" spans (category "optim"): the actions of step k (0-based, as train_gpt's "step k" lines) are
    those that start once k of the rank's optimizer steps have started and before the next one does. Without
    optimizer spans, steps are split at each "F0@s0" span (the first action of every step under every schedule);
  * a step's wall time runs from the first action start to the last action end over all ranks (so it leaves out
    the gradient reduction and optimizer after the last backward); a rank's idle share of the step is
    1 - (sum of its action durations) / wall.
"""
import argparse
import bisect
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_files import ScriptError, fail, read_input_file  # noqa: E402

ACTION = re.compile(r"^([FB])(\d+)@s(\d+)$")


def load(path):
    try:  # through the checked reader: a FIFO or a device is refused instead of blocking
        data = json.loads(read_input_file(path, "trace", 4 << 30))
    except ScriptError as e:
        fail("pipeline_bubble.py", str(e))
    except ValueError as e:
        fail("pipeline_bubble.py", f"{path} is not JSON: {e}")
    events = data["traceEvents"] if isinstance(data, dict) else data
    rank_of = {}
    track_of = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            m = re.search(r"(\d+)", e["args"]["name"])
            rank_of[e["pid"]] = int(m.group(1)) if m else e["pid"]
        elif e.get("name") == "thread_name":
            track_of[(e["pid"], e["tid"])] = e["args"]["name"]
    actions = {}  # rank -> [(ts, end, name)]
    optim = {}  # rank -> [ts of "optimizer step"]
    for e in events:
        if e.get("ph") != "X":
            continue
        rank = rank_of.get(e["pid"], e["pid"])
        if e.get("cat") == "pipeline" and ACTION.match(e["name"]):
            track = track_of.get((e["pid"], e["tid"]), "pipeline")
            if track != "pipeline":
                sys.exit(f"{path}: action {e['name']} of rank {rank} on track {track!r}, expected 'pipeline'")
            actions.setdefault(rank, []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif e.get("cat") == "optim" and e["name"] == "optimizer step":
            optim.setdefault(rank, []).append(e["ts"])
    if not actions:
        sys.exit(f"{path}: no pipeline actions (category 'pipeline'); was it run with --pp > 1 and --trace?")
    for v in actions.values():
        v.sort()
    for v in optim.values():
        v.sort()
    return actions, optim


def split_steps(actions, optim):
    """Returns {step: {rank: [(ts, end, name)]}} and how the steps were delimited."""
    steps = {}
    if all(optim.get(r) for r in actions):
        how = "per-rank 'optimizer step' spans"
        for rank, acts in actions.items():
            for a in acts:
                steps.setdefault(bisect.bisect_right(optim[rank], a[0]), {}).setdefault(rank, []).append(a)
    else:
        how = "'F0@s0' spans"
        starts = sorted(a[0] for acts in actions.values() for a in acts if a[2] == "F0@s0")
        for rank, acts in actions.items():
            for a in acts:
                steps.setdefault(bisect.bisect_right(starts, a[0]) - 1, {}).setdefault(rank, []).append(a)
    counts = {len(acts) for s in steps.values() for acts in s.values()}
    if len(counts) != 1:
        print(f"warning: actions per rank per step differ: {sorted(counts)}", file=sys.stderr)
    return steps, how


def step_idle(per_rank):
    t0 = min(a[0] for acts in per_rank.values() for a in acts)
    t1 = max(a[1] for acts in per_rank.values() for a in acts)
    wall = t1 - t0
    return t0, wall, {r: 1.0 - sum(a[1] - a[0] for a in acts) / wall for r, acts in per_rank.items()}


def cmd_bubble(args):
    idle, walls, per_rank, kept_all, step_means = [], [], {}, [], []
    for trace in args.trace:  # one per round: their steps are pooled
        steps, how = split_steps(*load(trace))
        kept = [k for k in sorted(steps) if k >= args.skip]
        if not kept:
            sys.exit(f"{trace}: no step >= {args.skip} (steps found: {sorted(steps)})")
        print(f"{trace}: steps {kept[0]}-{kept[-1]} delimited by {how}", file=sys.stderr)
        kept_all += kept
        for k in kept:
            _, wall, by_rank = step_idle(steps[k])
            walls.append(wall)  # microseconds, as every Chrome-trace ts and dur
            step_means.append(statistics.mean(by_rank.values()))
            for r, v in by_rank.items():
                idle.append(v)
                per_rank.setdefault(r, []).append(v)
    p, m, v = args.pp, args.microbatches, args.virtual
    theory = (p - 1) / (v * m + p - 1)
    measured = statistics.mean(idle)
    # The median step resists the VM's occasional stalls (one action 3x its usual time), which the mean carries.
    median = statistics.median(step_means)
    ranks = " / ".join(f"{statistics.mean(per_rank[r]):.3f}" for r in sorted(per_rank))
    print(f"| {args.label} | {m} | {v} | {len(kept_all)} | {statistics.mean(walls) * 1e-3:.1f} | {measured:.3f} | "
          f"{median:.3f} | {ranks} | {theory:.3f} | {measured / theory:.2f} | {median / theory:.2f} |")


def cmd_timeline(args):
    actions, optim = load(args.trace)
    steps, how = split_steps(actions, optim)
    ms = 1e-3  # Chrome-trace ts and dur are microseconds (displayTimeUnit only sets how a viewer shows them)
    if args.step not in steps:
        sys.exit(f"{args.trace}: no step {args.step} (steps found: {sorted(steps)})")
    t0, wall, idle = step_idle(steps[args.step])
    print(f"# step {args.step} (delimited by {how}); times in ms from the step's first action start; "
          f"step wall {wall * ms:.3f} ms")
    print(f"{'rank':>4}  {'#':>2}  {'action':<8}  {'start':>8}  {'end':>8}  {'dur':>7}  {'gap before':>10}")
    for rank in sorted(steps[args.step]):
        prev = 0.0
        for i, (ts, end, name) in enumerate(steps[args.step][rank]):
            print(f"{rank:>4}  {i:>2}  {name:<8}  {(ts - t0) * ms:>8.3f}  {(end - t0) * ms:>8.3f}  "
                  f"{(end - ts) * ms:>7.3f}  {(ts - t0 - prev) * ms:>10.3f}")
            prev = end - t0
        print(f"{rank:>4}  {'':>2}  {'idle':<8}  {'':>8}  {'':>8}  {'':>7}  {idle[rank] * 100:>9.1f}%")
    if args.width:
        print(f"# one column = {wall * ms / args.width:.3f} ms; F/B actions drawn as their micro-batch number, "
              f"forward digits, backward letters (a = 0), '.' idle")
        for rank in sorted(steps[args.step]):
            row = ["."] * args.width
            for ts, end, name in steps[args.step][rank]:
                kind, mb = name[0], int(ACTION.match(name).group(2))
                ch = str(mb % 10) if kind == "F" else chr(ord("a") + mb % 26)
                lo = int((ts - t0) / wall * args.width)
                hi = max(lo + 1, int(round((end - t0) / wall * args.width)))
                for c in range(lo, min(hi, args.width)):
                    row[c] = ch
            print(f"rank {rank} |{''.join(row)}|")


def cmd_throughput(args):
    toks, times, peaks, losses = [], [], {}, []
    for log in args.log:  # one per round: their steps are pooled, the peaks maxed
        with open(log) as f:
            lines = f.read().splitlines()
        n = len(toks)
        for line in lines:
            m = re.match(r"^step (\d+) .*time_ms ([\d.]+) tok/s ([\d.]+)", line)
            if m and int(m.group(1)) >= args.skip:
                times.append(float(m.group(2)))
                toks.append(float(m.group(3)))
        final = [line for line in lines if line.startswith("{")]
        if len(toks) == n or not final:
            sys.exit(f"{log}: no 'step N ... tok/s' lines >= {args.skip} or no final JSON line")
        summary = json.loads(final[-1])
        losses.append(summary.get("final_loss", float("nan")))
        for p in summary.get("peak_memory", []):
            old = peaks.get(p["rank"], {})
            peaks[p["rank"]] = {k: max(v, old.get(k, 0)) for k, v in p["peak_bytes"].items()}
    mib = " / ".join(f"{peaks[r]['total'] / (1 << 20):.1f}" for r in sorted(peaks)) or "-"
    act = " / ".join(f"{peaks[r].get('activations', 0) / (1 << 20):.1f}" for r in sorted(peaks)) or "-"
    tok = statistics.mean(toks)
    print(f"| {args.label} | {args.rows} | {len(toks)} | {statistics.mean(times):.1f} | {tok:.0f} | "
          f"{tok / args.ref if args.ref else 1.0:.2f} | {mib} | {act} | {losses[-1]:.4f} |")
    print(f"{tok:.3f}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bubble")
    b.add_argument("trace", nargs="+")
    b.add_argument("--pp", type=int, required=True)
    b.add_argument("--microbatches", type=int, required=True)
    b.add_argument("--virtual", type=int, default=1)
    b.add_argument("--skip", type=int, default=2, help="leave out the steps before this one (warm-up)")
    b.add_argument("--label", default="")
    t = sub.add_parser("timeline")
    t.add_argument("trace")
    t.add_argument("--step", type=int, default=3)
    t.add_argument("--width", type=int, default=0, help="also draw a text Gantt chart this many columns wide")
    r = sub.add_parser("throughput")
    r.add_argument("log", nargs="+")
    r.add_argument("--skip", type=int, default=2)
    r.add_argument("--label", default="")
    r.add_argument("--rows", default="-", help="global rows per step (for the table)")
    r.add_argument("--ref", type=float, default=0.0, help="tok/s of the reference layout (ratio column)")
    args = ap.parse_args()
    {"bubble": cmd_bubble, "timeline": cmd_timeline, "throughput": cmd_throughput}[args.cmd](args)


if __name__ == "__main__":
    main()
