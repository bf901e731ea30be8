#!/usr/bin/env python3
"""Checks strata-plan --simulate (docs/scaling.md, "The simulator") against what was measured and published.

  scripts/check_simulator.py                    # every row of docs/scaling/scaling.csv on tools/clusters/cpu_vm.json
  scripts/check_simulator.py --published        # ... and the published points (tools/clusters/published_points.json)
  scripts/check_simulator.py --answers          # the layout sweep for GPT-2 1.5B and a 70B model on H100s
  scripts/check_simulator.py --calibrate        # search cpu_vm.json's fitted constants (prints them; writes nothing)

Prints predicted against measured step time per row and the worst error, then (--published) predicted against
published per point. Exits 1 when a row is off by more than --tolerance or a point by more than
--published-tolerance.
"""
import argparse
import copy
import csv
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTERS = os.path.join(ROOT, "tools", "clusters")


def scale_models():
    """The sweep's model flags, from scripts/scale.py itself, so the two cannot drift apart."""
    spec = importlib.util.spec_from_file_location("scale", os.path.join(ROOT, "scripts", "scale.py"))
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    models = {}
    for name, flags in scale.MODELS.items():
        get = lambda f: int(flags[flags.index(f) + 1])
        models[name] = {"layers": get("--layers"), "hidden": get("--embd"), "heads": get("--heads"),
                        "seq": get("--seq"), "vocab": get("--vocab")}
    return models, scale.LAYOUTS


def simulate(plan, args):
    """Runs strata-plan --simulate --json with the given flags; returns its prediction (exit 2, "does not fit",
    still predicts)."""
    cmd = [plan, "--simulate", "--json"] + [str(a) for a in args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode not in (0, 2):
        sys.exit(f"check_simulator.py: {' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def model_flags(m):
    flags = ["--layers", m["layers"], "--hidden", m["hidden"], "--heads", m["heads"], "--seq", m["seq"],
             "--vocab", m["vocab"]]
    if "params" in m:
        flags += ["--params", m["params"]]
    return flags


def row_flags(row, models, layouts, cluster):
    """strata-plan flags that describe one sweep run: the same model, layout and batch train_gpt ran."""
    tp, pp, extra, _env, _smallest = layouts[row["layout"]]
    dp = int(row["dp"])
    rows_per_rank = int(row["rows_per_step"]) // dp
    micro = 4 if pp > 1 else 1  # scale.py's pp layout runs 4 micro-batches
    flags = model_flags(models[row["model"]]) + [
        "--dp", dp, "--tp", tp, "--pp", pp, "--micro-batch", rows_per_rank // micro, "--microbatches", micro,
        "--zero-stage", 3, "--param-dtype", "f32", "--reduce-dtype", "f32", "--cluster", cluster]
    # Both hybrid layouts replicate across 2 groups at np 4: dp-replicate 2, and shard-in-node with nodes of 2 ranks.
    if row["layout"].startswith("hybrid"):
        flags += ["--dp-replicate", dp // 2]
    return flags


def check_rows(plan, cluster, csv_path, verbose=True):
    models, layouts = scale_models()
    rows = list(csv.DictReader(open(csv_path)))
    results = []
    for row in rows:
        pred = simulate(plan, row_flags(row, models, layouts, cluster))["step_s"] * 1e3
        meas = float(row["step_ms"])
        results.append((row, pred, meas, (pred - meas) / meas))
    if verbose:
        print(f"{'model':<6} {'scaling':<7} {'layout':<12} {'np':>3} {'measured_ms':>12} {'predicted_ms':>13} "
              f"{'error':>8}")
        for row, pred, meas, err in results:
            print(f"{row['model']:<6} {row['scaling']:<7} {row['layout']:<12} {row['np']:>3} {meas:>12.2f} "
                  f"{pred:>13.2f} {err * 100:>+7.1f}%")
    return results


def megatron_flops(m, batch):
    """Narayanan et al. 2021, eq. 3: FLOPs of one step with recomputation."""
    s, l, h, V = m["seq"], m["layers"], m["hidden"], m["vocab"]
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def check_published(plan, path):
    points = json.load(open(path))["points"]
    results = []
    for p in points:
        lay = p["layout"]
        world = lay["dp"] * lay["tp"] * lay["pp"]
        flags = model_flags(p["model"]) + [
            "--dp", lay["dp"], "--tp", lay["tp"], "--pp", lay["pp"], "--zero-stage", lay["zero_stage"],
            "--micro-batch", lay["micro_batch"], "--cluster", os.path.join(CLUSTERS, p["cluster"])]
        if lay.get("recompute"):
            flags.append("--recompute")
        if not lay.get("tiled_attention", True):
            flags.append("--no-tiled-attention")
        if "global_batch" in lay:
            flags += ["--global-batch", lay["global_batch"]]
        pred = simulate(plan, flags)
        if p["metric"] == "tokens_per_s_per_device":
            value = pred["tokens_per_s_per_device"]
        elif p["metric"] == "megatron_tflops":
            batch = pred["tokens_per_step"] / p["model"]["seq"]
            value = megatron_flops(p["model"], batch) / pred["step_s"] / world / 1e12
        else:
            sys.exit(f"check_simulator.py: {path}: unknown metric {p['metric']}")
        results.append((p, value, (value - p["published"]) / p["published"], pred))
    print(f"\n{'point':<62} {'metric':<24} {'published':>10} {'predicted':>10} {'error':>8}")
    for p, value, err, _ in results:
        print(f"{p['name']:<62} {p['metric']:<24} {p['published']:>10.1f} {value:>10.1f} {err * 100:>+7.1f}%")
    return results


# ---- --answers: the fastest layout that fits, per model and GPU count ----------------------------------------------

ANSWER_MODELS = {
    # GPT-2 XL's dimensions; the 70B model has Llama-2-70B's depth, width, heads, sequence and vocabulary but is our
    # GPT block (multi-head attention, a 4h GELU MLP, tied embeddings): 68.7B parameters by our count.
    "gpt2-1.5b": ({"layers": 48, "hidden": 1600, "heads": 25, "seq": 1024, "vocab": 50257}, 512),
    "70b": ({"layers": 80, "hidden": 8192, "heads": 64, "seq": 4096, "vocab": 32000}, 1024),
}


def sweep(plan, name, gpus, cluster, offload="none"):
    m, global_batch = ANSWER_MODELS[name]
    per_node = json.load(open(cluster))["devices_per_node"]
    best = []
    for tp in (1, 2, 4, 8):
        if m["heads"] % tp or m["hidden"] % tp or tp > per_node:
            continue
        for pp in (1, 2, 4, 8, 16):
            if gpus % (tp * pp) or pp > m["layers"]:
                continue
            dp = gpus // (tp * pp)
            for stage in (0, 1, 2, 3):
                for hybrid in (False, True):
                    shard = per_node // tp
                    if hybrid and (stage == 0 or dp <= shard or dp % shard):
                        continue
                    for recompute in (False, True):
                        for mb in (1, 2, 4, 8):
                            if global_batch % (dp * mb):
                                continue
                            M = global_batch // (dp * mb)
                            if pp > 1 and M < pp:
                                continue
                            flags = model_flags(m) + ["--dp", dp, "--tp", tp, "--pp", pp, "--zero-stage", stage,
                                                      "--micro-batch", mb, "--microbatches", M, "--cluster", cluster]
                            if tp > 1:
                                flags.append("--sequence-parallel")
                            if recompute:
                                flags.append("--recompute")
                            if hybrid:
                                flags += ["--dp-replicate", dp // shard]
                            if offload != "none":
                                if stage != 3 or not recompute:
                                    continue
                                flags += ["--offload", offload]
                            pred = simulate(plan, flags)
                            if pred["fits"]:
                                layout = (f"ZeRO-{stage}{' hybrid(node)' if hybrid else ''} dp {dp} tp {tp} pp {pp} "
                                          f"mb {mb}x{M}{' recompute' if recompute else ''}"
                                          f"{' offload ' + offload if offload != 'none' else ''}")
                                best.append((pred["tokens_per_s_per_device"], layout, pred))
    best.sort(key=lambda t: -t[0])
    return best


def answers(plan, cluster):
    print(f"{'model':<10} {'GPUs':>5} {'layout (fastest that fits in 80 GB)':<62} {'tok/s/GPU':>10} {'MFU':>6} "
          f"{'GB':>6} {'exposed':>8} {'bubble':>7}   runner-up")
    for name in ANSWER_MODELS:
        m, global_batch = ANSWER_MODELS[name]
        print(f"# {name}: global batch {global_batch} sequences of {m['seq']} tokens")
        for gpus in (8, 64, 512):
            best = sweep(plan, name, gpus, cluster)
            if not best:  # then the last resort: ZeRO-3 with the state (and parameters) in host memory
                best = sweep(plan, name, gpus, cluster, "optimizer") or sweep(plan, name, gpus, cluster,
                                                                               "optimizer+params")
            if not best:
                print(f"{name:<10} {gpus:>5} nothing fits, not even with offload")
                continue
            tps, layout, p = best[0]
            runner = f"{best[1][1]} ({best[1][0]:.0f})" if len(best) > 1 else "-"
            print(f"{name:<10} {gpus:>5} {layout:<62} {tps:>10.0f} {p['mfu'] * 100:>5.1f}% "
                  f"{p['memory_bytes'] / 1e9:>6.1f} {p['exposed_comm_s'] / p['step_s'] * 100:>7.1f}% "
                  f"{p['bubble_s'] / p['step_s'] * 100:>6.1f}%   {runner}")


# ---- --calibrate: the CPU machine's constants ----------------------------------------------------------------------

FITTED = [("gemm_efficiency", None, 0.2, 1.0), ("memory_bandwidth_gbs", None, 0.05, 100.0),
          ("bandwidth_gbs", "intra_node", 0.05, 50.0), ("thread_efficiency", "cpu", 0.3, 1.0),
          ("oversubscribed_latency_us", "cpu", 1.0, 1e5), ("host_overhead_ms", "cpu", 0.01, 1000.0)]


def calibrate(plan, cluster, csv_path):
    """Coordinate search (multiplicative steps, shrinking) minimising the worst relative error, then the mean."""
    base = json.load(open(cluster))

    def get(c, key, sect):
        # An optional field the file leaves out is 0; a trial then starts it from its lower bound.
        return (c[sect] if sect else c).get(key, 0.0)

    def put(c, key, sect, v):
        (c[sect] if sect else c)[key] = v

    def score(c):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(c, f)
        try:
            errs = [abs(e) for *_, e in check_rows(plan, f.name, csv_path, verbose=False)]
        finally:
            os.unlink(f.name)
        return (max(errs), sum(errs) / len(errs))

    cur, best = copy.deepcopy(base), score(base)
    for step in (1.5, 1.2, 1.05):
        improved = True
        while improved:
            improved = False
            for key, sect, lo, hi in FITTED:
                for factor in (step, 1 / step):
                    trial = copy.deepcopy(cur)
                    put(trial, key, sect, min(hi, max(lo, get(cur, key, sect) * factor)))
                    s = score(trial)
                    if s < best:
                        cur, best, improved = trial, s, True
        print(f"step {step}: worst {best[0] * 100:.1f}%, mean {best[1] * 100:.1f}%: " +
              ", ".join(f"{k}={get(cur, k, s):.4g}" for k, s, *_ in FITTED), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", default=os.path.join(ROOT, "build", "bin", "strata-plan"), help="strata-plan binary")
    p.add_argument("--csv", default=os.path.join(ROOT, "docs", "scaling", "scaling.csv"))
    p.add_argument("--cluster", default=os.path.join(CLUSTERS, "cpu_vm.json"))
    p.add_argument("--points", default=os.path.join(CLUSTERS, "published_points.json"))
    p.add_argument("--tolerance", type=float, default=0.15, help="largest relative error allowed per sweep row")
    p.add_argument("--published-tolerance", type=float, default=0.25, help="... per published point")
    p.add_argument("--published", action="store_true", help="also check the published points")
    p.add_argument("--answers", action="store_true", help="print the layout sweep for 1.5B and 70B on H100s only")
    p.add_argument("--answers-cluster", default=os.path.join(CLUSTERS, "h100_ib400.json"))
    p.add_argument("--calibrate", action="store_true", help="search cpu_vm.json's fitted constants only")
    args = p.parse_args()
    if not os.access(args.plan, os.X_OK):
        sys.exit(f"check_simulator.py: no strata-plan at {args.plan} (build it, or give --plan)")
    if args.answers:
        answers(args.plan, args.answers_cluster)
        return 0
    if args.calibrate:
        calibrate(args.plan, args.cluster, args.csv)
        return 0
    rows = check_rows(args.plan, args.cluster, args.csv)
    worst = max(rows, key=lambda r: abs(r[3]))
    over = [r for r in rows if abs(r[3]) > args.tolerance]
    print(f"# worst error {worst[3] * 100:+.1f}% ({worst[0]['model']} {worst[0]['scaling']} {worst[0]['layout']} "
          f"np {worst[0]['np']}); {len(over)} of {len(rows)} rows over {args.tolerance * 100:.0f}%; mean |error| "
          f"{sum(abs(r[3]) for r in rows) / len(rows) * 100:.1f}%")
    failed = bool(over)
    if args.published:
        pts = check_published(args.plan, args.points)
        bad = [r for r in pts if abs(r[2]) > args.published_tolerance]
        print(f"# worst published error {max(abs(r[2]) for r in pts) * 100:.1f}%; {len(bad)} of {len(pts)} points "
              f"over {args.published_tolerance * 100:.0f}%")
        failed = failed or bool(bad)
    print("# " + ("FAIL" if failed else "OK"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
