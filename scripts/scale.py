#!/usr/bin/env python3
"""Scaling sweeps of train_gpt (docs/scaling.md): a grid of rank counts, layouts, model sizes and weak or strong
scaling, one run at a time, into one CSV row per run, then PNG plots (matplotlib, when installed).

  scripts/scale.py --np 1,2,4 --layouts dp,hybrid,tp2,pp2 --models tiny,small --scaling weak,strong --out results/scaling

Weak scaling keeps --rows rows per data-parallel rank; strong scaling keeps --global-rows rows per step over all
data-parallel ranks. A layout that does not fit a rank count (tp 2 at np 1, hybrid below np 4) is left out, and so is a
strong-scaling run whose rows do not divide. The CSV is resumable: a rerun skips the rows it already has (same model,
scaling, layout and np), so an interrupted sweep goes on where it stopped. --plots-only redraws from the CSV.

Every run goes through scripts/launch.sh (docs/multi-node.md), which prints its mpirun command and forwards every
STRATA_* variable. By default a run's ranks share this machine, unbound. Across nodes, --hostfile FILE and
--ranks-per-node K run np <= K on the first host and np = n x K on the first n hosts of FILE (other np are left out):

  scripts/scale.py --hostfile hosts --ranks-per-node 8 --np 8,16,32,64 --layouts dp,hybrid-node --models small

Per run: tokens/s (whole job and per rank) at the median step time (steps 2 and on; the mean beside it), the communication and exposed communication per step
(train_gpt's means over the steps after the first two), the ledger's peak per rank, and rank 0's memory after step 0
per category, measured and as the planner predicts it. The plots include the step time strata-plan --simulate predicts
for every run (--cluster, this machine's file by default) against the measured one.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_files import DirLock, ScriptError, fail, read_input_file  # noqa: E402

LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.sh")

MODELS = {
    # name: train_gpt model flags
    "tiny": ["--layers", "4", "--embd", "128", "--heads", "4", "--seq", "64", "--ctx", "64", "--vocab", "256"],
    "small": ["--layers", "8", "--embd", "256", "--heads", "4", "--seq", "64", "--ctx", "64", "--vocab", "512"],
}
# name: (tp, pp, extra flags, environment, smallest np)
LAYOUTS = {
    "dp": (1, 1, [], {}, 1),
    "hybrid": (1, 1, ["--dp-replicate", "2"], {}, 4),
    "hybrid-node": (1, 1, ["--dp-shard", "node"], {"STRATA_RANKS_PER_NODE": "2"}, 4),
    "tp2": (2, 1, ["--tp", "2"], {}, 2),
    "pp2": (1, 2, ["--pp", "2", "--microbatches", "4"], {}, 2),
}
CATEGORIES = ["param_shard", "grad_shard", "optim_state", "unsharded_params", "unsharded_grads", "comm_buffer",
              "activations", "workspace"]
FIELDS = (["model", "scaling", "layout", "np", "dp", "tp", "pp", "rows_per_step", "tokens_per_step", "steps",
           "tokens_per_s", "tokens_per_s_per_rank", "step_ms", "step_ms_mean", "comm_ms", "exposed_comm_ms", "peak_mib_max_rank",
           "step0_measured_mib", "step0_predicted_mib"]
          + [f"measured_{c}" for c in CATEGORIES] + [f"predicted_{c}" for c in CATEGORIES] + ["final_loss"])


def mib(b):
    return round(b / (1024 * 1024), 3)


def launch_args(args, np_):
    """scripts/launch.sh's placement flags for np_ ranks: on this machine, unbound (as the calibration runs were), or
    node by node on the first hosts of --hostfile. None when np_ does not fill whole nodes."""
    if not args.hostfile:
        return ["--ranks-per-node", str(np_), "--bind", "none"]
    k = args.ranks_per_node
    if np_ <= k:
        nodes, k = 1, np_
    elif np_ % k == 0:
        nodes = np_ // k
    else:
        return None
    if nodes > len(args.hosts):
        sys.exit(f"scale.py: np {np_} needs {nodes} nodes of {k} ranks; {args.hostfile} lists {len(args.hosts)}")
    if nodes not in args.host_files:
        f = tempfile.NamedTemporaryFile("w", prefix=f"scale-hosts-{nodes}-", suffix=".txt", delete=False)
        f.write("\n".join(args.hosts[:nodes]) + "\n")
        f.close()
        args.host_files[nodes] = f.name
    return ["--hostfile", args.host_files[nodes], "--ranks-per-node", str(k)]


def run_one(args, model, scaling, layout, np_):
    tp, pp, extra, env_extra, smallest = LAYOUTS[layout]
    if np_ < smallest or np_ % (tp * pp) != 0:
        return None
    dp = np_ // (tp * pp)
    if layout.startswith("hybrid") and dp % 2:
        return None
    if scaling == "weak":
        rows = args.rows
    else:
        if args.global_rows % dp:
            return None
        rows = args.global_rows // dp
    if pp > 1 and rows % 4:
        return None
    placement = launch_args(args, np_)
    if placement is None:
        print(f"scale.py: np {np_} is neither at most --ranks-per-node {args.ranks_per_node} nor a multiple of it: "
              f"left out", flush=True)
        return None
    metrics = os.path.join(args.out, ".metrics.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    cmd = [LAUNCH, *placement, "--", os.path.join(args.build, "bin", "train_gpt"), *MODELS[model], "--batch",
           str(rows), "--steps", str(args.steps), "--no-progress", "--metrics", metrics, *extra]
    env = dict(os.environ, STRATA_BACKEND="cpu", STRATA_LOG_LEVEL="warn", **env_extra)
    print("scale.py:", " ".join(f"{k}={v}" for k, v in env_extra.items()), " ".join(cmd), flush=True)
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise ScriptError(f"run did not end within --timeout {args.timeout} s: {' '.join(cmd)}") from None
    if out.returncode != 0:
        sys.exit(f"scale.py: run failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    try:
        summary = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ScriptError(f"run printed no summary line (train_gpt's last line of JSON): {' '.join(cmd)}\n"
                          f"{out.stdout[-2000:]}") from None
    seq = int(MODELS[model][MODELS[model].index("--seq") + 1])
    # The median step from step 2 on: one step slowed by another process on the shared cores moves a mean of 18
    # steps by several percent, and the median hardly at all (the tiny model at np 4: three runs' means 76.9-82.2 ms,
    # their medians 75.6-77.1).
    with open(metrics) as f:
        times = [json.loads(line)["time_ms"] for line in f if line.strip()]
    os.unlink(metrics)
    steady = sorted(times[2:] if len(times) > 2 else times)
    half = len(steady) // 2
    step_ms = steady[half] if len(steady) % 2 else (steady[half - 1] + steady[half]) / 2
    step0 = summary.get("step0_memory_rank0", {"measured": {}, "predicted": {}})
    row = {
        "model": model, "scaling": scaling, "layout": layout, "np": np_, "dp": dp, "tp": tp, "pp": pp,
        "rows_per_step": rows * dp, "tokens_per_step": rows * dp * seq, "steps": args.steps,
        "tokens_per_s": round(rows * dp * seq / step_ms * 1e3, 1),
        "tokens_per_s_per_rank": round(rows * dp * seq / step_ms * 1e3 / np_, 1),
        "step_ms": round(step_ms, 2), "step_ms_mean": round(summary["mean_step_ms"], 2),
        "comm_ms": round(summary["mean_comm_ms"], 2), "exposed_comm_ms": round(summary["mean_exposed_comm_ms"], 2),
        "peak_mib_max_rank": mib(max(p["peak_bytes"]["total"] for p in summary["peak_memory"])),
        "step0_measured_mib": mib(step0["measured"].get("total", 0)),
        "step0_predicted_mib": mib(step0["predicted"].get("total", 0)),
        "final_loss": summary["final_loss"],
    }
    for c in CATEGORIES:
        row[f"measured_{c}"] = step0["measured"].get(c, 0)
        row[f"predicted_{c}"] = step0["predicted"].get(c, 0)
    return row


def read_rows(path):
    """The rows of the sweep's CSV. A last row cut off (a sweep stopped while an older scale.py appended it: no
    newline at its end, or fields missing) is dropped with a warning, and its run is done again; a damaged row
    elsewhere is an error naming its line."""
    if not os.path.exists(path):
        return []
    text = read_input_file(path, "the sweep's CSV", 64 << 20)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        print(f"scale.py: warning: {path}: its last line was cut off (a sweep stopped while writing it): dropped, "
              f"that run is done again", file=sys.stderr, flush=True)
        lines = lines[:-1]
    rows = []
    reader = csv.DictReader(lines)
    for row in reader:
        if None in row or None in row.values():
            raise ScriptError(f"{path}: line {reader.line_num} has {len(row) - (None in row)} fields, the header "
                              f"{len(reader.fieldnames)}: the file is damaged; give another --out or remove it")
        rows.append(row)
    return rows


def write_rows(path, rows):
    """The whole CSV through a temporary beside it and a rename: a sweep stopped at any moment leaves the old file or
    the new one, never a row cut off."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def predicted_step_ms(rows, plan, cluster):
    """strata-plan --simulate's step time for each row (scripts/check_simulator.py maps a row to its flags); None
    where strata-plan is not built."""
    if not plan or not os.path.exists(plan):
        return None
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("check_simulator", os.path.join(here, "check_simulator.py"))
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    models, layouts = sim.scale_models()
    return [sim.simulate(plan, sim.row_flags(r, models, layouts, cluster))["step_s"] * 1e3 for r in rows]


def plot(rows, out_dir, predicted=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("scale.py: matplotlib is not installed (pip install matplotlib): CSV only, no plots", file=sys.stderr)
        return []
    written = []
    groups = sorted({(r["model"], r["scaling"]) for r in rows})
    for model, scaling in groups:
        sub = [r for r in rows if r["model"] == model and r["scaling"] == scaling]
        layouts = sorted({r["layout"] for r in sub})
        base = [float(r["tokens_per_s_per_rank"]) for r in sub if r["layout"] == "dp" and int(r["np"]) == 1]
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for layout in layouts:
            pts = sorted((int(r["np"]), r) for r in sub if r["layout"] == layout)
            nps = [n for n, _ in pts]
            axes[0].plot(nps, [float(r["tokens_per_s"]) for _, r in pts], marker="o", label=layout)
            if base:
                axes[1].plot(nps, [float(r["tokens_per_s_per_rank"]) / base[0] for _, r in pts], marker="o",
                             label=layout)
            axes[2].plot(nps, [float(r["peak_mib_max_rank"]) for _, r in pts], marker="o", label=layout)
        titles = ["tokens/s (job)", "scaling efficiency (tok/s per rank / dp at np 1)", "peak memory per rank (MiB)"]
        for ax, title in zip(axes, titles):
            ax.set_title(title)
            ax.set_xlabel("ranks (np)")
            ax.set_xticks(sorted({int(r["np"]) for r in sub}))
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"train_gpt {model}, {scaling} scaling (CPU backend)")
        fig.tight_layout()
        path = os.path.join(out_dir, f"scaling_{model}_{scaling}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    # The planner against the ledger: rank 0's memory after step 0, every run.
    fig, ax = plt.subplots(figsize=(5.5, 5))
    xs = [float(r["step0_measured_mib"]) for r in rows]
    ys = [float(r["step0_predicted_mib"]) for r in rows]
    ax.scatter(xs, ys)
    hi = max(xs + ys + [1])
    ax.plot([0, hi], [0, hi], color="grey", lw=0.8)
    ax.set_xlabel("measured (MiB, ledger)")
    ax.set_ylabel("predicted (MiB, planner)")
    ax.set_title("rank 0 memory after step 0, every run")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, "memory_predicted_vs_measured.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    if predicted:
        # The simulator against the sweep: each run's mean step time, with the +-15% band of the scaling issue.
        fig, ax = plt.subplots(figsize=(5.5, 5))
        for model in sorted({r["model"] for r in rows}):
            idx = [i for i, r in enumerate(rows) if r["model"] == model]
            ax.scatter([float(rows[i]["step_ms"]) for i in idx], [predicted[i] for i in idx], label=model)
        hi = max([float(r["step_ms"]) for r in rows] + predicted + [1]) * 1.1
        lo = min([float(r["step_ms"]) for r in rows] + predicted) / 1.1
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
        ax.plot([lo, hi], [lo * 1.15, hi * 1.15], color="grey", lw=0.5, ls="--")
        ax.plot([lo, hi], [lo * 0.85, hi * 0.85], color="grey", lw=0.5, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured step (ms)")
        ax.set_ylabel("predicted step (ms, strata-plan --simulate)")
        ax.set_title("step time, every run (dashed: +-15%)")
        ax.grid(alpha=0.3, which="both")
        ax.legend()
        fig.tight_layout()
        path = os.path.join(out_dir, "step_time_predicted_vs_measured.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def positive(text):
    """argparse type: a whole number >= 1 (argparse turns the ValueError into a one-line usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_list(text):
    """argparse type: a comma list of whole numbers >= 1 ("1,2,4")."""
    values = [positive(x) for x in text.split(",")] if text else []
    if not values:
        raise argparse.ArgumentTypeError("an empty list")
    return values


def main():
    try:
        run(sys.argv[1:])
    except ScriptError as e:
        fail("scale.py", str(e))


def run(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", default=[1, 2, 4], type=positive_list, help="rank counts, comma list")
    p.add_argument("--layouts", default="dp,hybrid,tp2,pp2", help=f"comma list of {', '.join(LAYOUTS)}")
    p.add_argument("--models", default="tiny", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--scaling", default="weak,strong", help="weak, strong or both")
    p.add_argument("--rows", type=positive, default=8, help="weak scaling: rows per data-parallel rank per step")
    p.add_argument("--global-rows", type=positive, default=32, help="strong scaling: rows per step over all ranks")
    p.add_argument("--steps", type=positive, default=8)
    p.add_argument("--build", default="build")
    p.add_argument("--out", default="results/scaling")
    p.add_argument("--timeout", type=positive, default=600, help="seconds per run")
    p.add_argument("--plots-only", action="store_true")
    p.add_argument("--hostfile", help="Open MPI hostfile: run across its hosts through scripts/launch.sh")
    p.add_argument("--ranks-per-node", type=positive, help="with --hostfile: ranks on each node (required)")
    p.add_argument("--cluster", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "tools", "clusters", "cpu_vm.json"),
                   help="cluster file for the predicted step time plot (strata-plan --simulate)")
    args = p.parse_args(argv)
    for name, known in (("layouts", LAYOUTS), ("models", MODELS)):
        bad = [x for x in getattr(args, name).split(",") if x not in known]
        if bad:
            p.error(f"--{name}: unknown {', '.join(bad)} (known: {', '.join(known)})")
    bad = [x for x in args.scaling.split(",") if x not in ("weak", "strong")]
    if bad:
        p.error(f"--scaling: unknown {', '.join(bad)} (weak, strong)")
    args.hosts, args.host_files = [], {}
    if args.hostfile:
        if not args.ranks_per_node or args.ranks_per_node < 1:
            p.error("--hostfile needs --ranks-per-node K (K >= 1)")
        # Through the checked reader: a FIFO or a device is refused instead of blocking the sweep forever.
        text = read_input_file(args.hostfile, "--hostfile")
        args.hosts = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        if not args.hosts:
            p.error(f"--hostfile: {args.hostfile} lists no host")
    elif args.ranks_per_node:
        p.error("--ranks-per-node goes with --hostfile (on this machine a run's ranks are its np)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out '{args.out}' exists and is not a directory (the sweep writes scaling.csv and plots into it)")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.error(f"--out '{args.out}': cannot create it: {e.strerror}")
    # One sweep owns its --out: two would run the same rows and replace each other's CSV.
    lock = DirLock(args.out, "--out", "scale.py")
    if lock.takeover:
        print(f"scale.py: warning: {lock.takeover}", file=sys.stderr, flush=True)
    path = os.path.join(args.out, "scaling.csv")
    rows = read_rows(path)
    if rows and not args.plots_only and list(rows[0].keys()) != FIELDS:
        sys.exit(f"scale.py: {path} has other columns than this scale.py writes (an older version's sweep): "
                 f"give another --out")
    try:
        sweep(args, path, rows)
    finally:
        for f in args.host_files.values():
            os.unlink(f)
    print(f"scale.py: {len(rows)} rows in {path}")
    predicted = predicted_step_ms(rows, os.path.join(args.build, "bin", "strata-plan"), args.cluster)
    for png in plot(rows, args.out, predicted):
        print(f"scale.py: wrote {png}")


def sweep(args, path, rows):
    """Runs the grid's missing rows, appending each to the CSV at `path` and to `rows` as it finishes."""
    if not args.plots_only:
        have = {(r["model"], r["scaling"], r["layout"], int(r["np"])) for r in rows}
        for model in args.models.split(","):
            for scaling in args.scaling.split(","):
                for layout in args.layouts.split(","):
                    for np_ in args.np:
                        if (model, scaling, layout, np_) in have:
                            print(f"scale.py: have {model} {scaling} {layout} np {np_}", flush=True)
                            continue
                        row = run_one(args, model, scaling, layout, np_)
                        if row is None:
                            continue
                        rows.append({k: str(v) for k, v in row.items()})
                        write_rows(path, rows)  # after every run: a stopped sweep keeps its rows, whole


if __name__ == "__main__":
    main()
