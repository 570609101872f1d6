#!/usr/bin/env python3
"""mpi_scaling.py: replicated training over MPI ranks, measured, and a cost model of larger runs.

Measures, in one run, replicated fashion_cnn.json (Fashion-MNIST) and char_gpt.json (Debian's
fortunes) on 1, 2 and 3 ranks of one lavapipe device each (LP_NUM_THREADS=1 per rank), a fixed
global batch, and 1 rank with two lavapipe threads (LP_NUM_THREADS=2) against the 2-rank run: per
step (the later steps only: the first --skip steps hold start-up), rank 0's step time, samples/s,
communication and bytes moved, and how much of the reduction the overlap hides, twice:
  - the engine's attribution (`train --json`: communication_hidden_seconds counts a reduction as
    hidden when its device had not finished its last bucket as the reduction ended), and
  - the trace's: how much of each `comm:allreduce` interval on the host lies inside the device's
    own busy intervals (`--trace`, rank 0's first device), i.e. what really ran beside compute.
Each configuration runs --repeats times (3); the table gives the run of most samples/s, because
the machine is shared. Before each run it waits (up to --idle-wait s) for the CPUs to be idle,
and it records what share of the CPUs other processes took during the run.

Then it fits a cost model to those runs and predicts larger ones (weak scaling: each rank keeps
the measured per-rank batch; one device per rank):
  - compute: the 1-rank step time T1 (per-sample time T1 / batch), measured on lavapipe with one
    thread, and a device 50x faster;
  - reduction, this implementation (vkt_world_allreduce_f32: every rank sends the bucket to rank 0,
    which sums in rank order and sends the sum back): r_k = 2 (N-1) (alpha + B_k / beta) at rank 0
    for bucket k of B_k bytes; alpha and beta fitted (weighted least squares, relative error) to
    the fastest later-step time of buckets 1..K-1 on 2 and 3 ranks (bucket 0 holds the wait for
    the slowest rank); for a network, beta is its link rate and alpha an assumed per-message
    latency (NETWORKS);
  - a bandwidth-optimal ring all-reduce instead: r_k = 2 (N-1) alpha + 2 (N-1) / N * B_k / beta;
  - overlap: bucket k (last layers first) is ready at a measured fraction of the backward window
    (the device time from the first bucket's gradients to the last's, itself a measured fraction
    of T1); the host reduces buckets in order, each once it is ready and the previous one is done;
    the step ends when the last bucket is reduced: step = T1 + (end of the last reduction - the
    last bucket ready).

usage: python3 scripts/mpi_scaling.py BUILD/vktrain [--json OUT.json] [--repeats 3] [--skip 5]
           [--cnn-steps 50] [--gpt-steps 30] [--cnn-batch 64] [--gpt-batch 8] [--idle-wait 30]
           [--fit-only IN.json]
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader,tcp",
          "--mca", "btl_vader_single_copy_mechanism", "none"]
BUCKET_BYTES = 256 << 10  # parallel/replicated.c
MAX_BUCKETS = 32
FAST = 50.0  # the faster device: this many times lavapipe's one-thread step
# Networks of the prediction: (name, link bytes/s, assumed per-message latency alpha in s).
NETWORKS = [("10 Gbit/s", 10e9 / 8, 25e-6), ("100 Gbit/s", 100e9 / 8, 10e-6)]
PREDICT_RANKS = [8, 64]


# ---------------------------------------------------------------------------------------------
# The machine


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


def busy_fraction(seconds):
    b0, t0 = cpu_jiffies()
    time.sleep(seconds)
    b1, t1 = cpu_jiffies()
    return (b1 - b0) / max(1, t1 - t0)


def wait_idle(limit_s, threshold=0.25):
    """Waits until a one-second sample of the CPUs is under threshold busy; returns the last."""
    end = time.time() + limit_s
    while True:
        f = busy_fraction(1.0)
        if f < threshold or time.time() >= end:
            return f


# ---------------------------------------------------------------------------------------------
# The runs


def buckets_of(binary, model):
    """The replicated buckets (parallel/replicated.c make_buckets), last layers first, as dense
    bytes of their parameters: the bytes that cross ranks."""
    out = subprocess.run([binary, "model", model, "--json"], capture_output=True, text=True,
                         check=True).stdout
    j = json.loads(out)
    top = [l["parameters"] * 4 for l in j["layers"] if "." not in l["path"]]
    b, acc = [], 0
    for l in range(len(top) - 1, -1, -1):
        acc += top[l]
        close = acc >= BUCKET_BYTES or l == 0 or len(b) == MAX_BUCKETS - 1
        if close and (l == 0 or len(b) < MAX_BUCKETS - 1):
            b.append(acc)
            acc = 0
    return j["parameters"], b


def union_len(iv):
    """Total length of a union of intervals."""
    total, end = 0.0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def inside(a, b, iv):
    """Length of [a, b) inside the union of intervals iv."""
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in merged(iv))


def merged(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def trace_steps(path, skip):
    """Per later step of rank 0's first device (microseconds in the trace, seconds out)."""
    with open(path) as f:
        t = json.load(f)
    pid = t["otherData"]["devices"][0]["pid"]
    by = {}
    for e in t["traceEvents"]:
        if e.get("ph") != "X" or e.get("pid") != pid or "step" not in e.get("args", {}):
            continue
        by.setdefault(e["args"]["step"], []).append(e)
    steps = sorted(by)
    out = []
    for s in steps:
        if s <= skip or s + 1 not in by:  # start-up, or no next step to end this one
            continue
        ev = by[s]
        start = min(e["ts"] for e in ev)
        nxt = min(e["ts"] for e in by[s + 1])
        dev = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] != "comm:allreduce"]
        red = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == "comm:allreduce")
        copies = sum(e["dur"] for e in ev if e["name"] in ("comm:grad_out", "comm:grad_in"))
        # A bucket's gradients are out at its comm:grad_out's end, or, for the buckets lavapipe
        # runs untimed (parallel/replicated.c), at the end of its one "bwd:bucket" event.
        ready = sorted(e["ts"] + e["dur"] for e in ev
                       if e["name"] == "comm:grad_out" or e["name"].startswith("bwd:bucket"))
        busy = union_len(dev)
        out.append({
            "step": s,
            "wall_s": (nxt - start) * 1e-6,
            "busy_s": busy * 1e-6,
            "reduce_s": [(b - a) * 1e-6 for a, b in red],
            "copies_s": copies * 1e-6,
            "overlapped_s": sum(inside(a, b, dev) for a, b in red) * 1e-6,
            # backward window: from the first bucket's gradients out to the last's
            "window_s": (ready[-1] - ready[0]) * 1e-6 if len(ready) > 1 else 0.0,
            "ready_frac": [(r - ready[0]) / (ready[-1] - ready[0]) for r in ready]
            if len(ready) > 1 and ready[-1] > ready[0] else [],
        })
    return out


def mean(v):
    return sum(v) / len(v) if v else 0.0


def run_one(binary, src, model, ranks, threads, batch, steps, skip, idle_wait):
    tmp = tempfile.mkdtemp(prefix="mpi_scaling.")
    trace = os.path.join(tmp, "trace.json")
    train = [binary, "train", "--model", os.path.join(src, "assets", "models", model + ".json"),
             "--batch", str(batch), "--max-steps", str(steps), "--epochs", "1",
             "--limit-train", str(steps * batch), "--limit-test", str(batch), "--seed", "1",
             "--device", "llvmpipe", "--json", "--quiet", "--trace", trace]
    env = dict(os.environ, LP_NUM_THREADS=str(threads))
    env.setdefault("VKT_CACHE_DIR", "/tmp/vkc")
    if ranks > 1:
        cmd = MPIRUN + ["-x", "LP_NUM_THREADS", "-x", "VKT_CACHE_DIR", "-np", str(ranks)] + train
        cmd += ["--strategy", "replicated"]
    else:
        cmd = train
    idle = wait_idle(idle_wait)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0, _ = cpu_jiffies()
    w0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - w0
    b1, _ = cpu_jiffies()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    j = json.loads(p.stdout.strip().splitlines()[-1])
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    ours = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    others = max(0.0, (b1 - b0) / hz - ours) / (ncpu * wall)
    ts = trace_steps(trace, skip)
    try:
        os.remove(trace)
        os.rmdir(tmp)
    except OSError:
        pass
    d0 = j["devices"][0]
    n = j["steps"]
    later = j["first_step"]["later_step_seconds"]
    red = [sum(s["reduce_s"]) for s in ts]
    return {
        "model": model, "ranks": ranks, "threads_per_rank": threads, "global_batch": batch,
        "steps": n, "later_steps_measured": len(ts), "command": " ".join(cmd),
        "idle_before": idle, "others_cpu_share": others, "run_seconds": wall,
        "later_step_seconds": later,
        "samples_per_sec": batch / later,
        "trace_step_seconds": mean([s["wall_s"] for s in ts]),
        "device_busy_seconds_per_step": mean([s["busy_s"] for s in ts]),
        # engine figures (train --json, rank 0's first device, every step)
        "engine_comm_seconds_per_step": d0["communication_seconds"] / n,
        "engine_hidden_seconds_per_step": d0["communication_hidden_seconds"] / n,
        "engine_bytes_moved_per_step": d0["bytes_moved"] / n,
        # trace figures (later steps)
        "reduce_seconds_per_step": mean(red),
        "copies_seconds_per_step": mean([s["copies_s"] for s in ts]),
        "comm_seconds_per_step": mean([sum(s["reduce_s"]) + s["copies_s"] for s in ts]),
        "last_bucket_seconds_per_step": mean([s["reduce_s"][-1] for s in ts if s["reduce_s"]]),
        "overlapped_seconds_per_step": mean([s["overlapped_s"] for s in ts]),
        "window_seconds_per_step": mean([s["window_s"] for s in ts]),
        "bucket_min_seconds": [min(s["reduce_s"][k] for s in ts)
                               for k in range(min((len(s["reduce_s"]) for s in ts), default=0))],
        "ready_fraction": [mean([s["ready_frac"][k] for s in ts if len(s["ready_frac"]) > k])
                           for k in range(max((len(s["ready_frac"]) for s in ts), default=0))],
    }


# ---------------------------------------------------------------------------------------------
# The model


def fit_alpha_beta(points):
    """Weighted least squares of t = x1 * alpha + x2 / beta, x1 = 2 (N-1), x2 = 2 (N-1) B, with
    weights 1/t (relative error). Returns alpha, beta and the largest relative residual."""
    s11 = s12 = s22 = r1 = r2 = 0.0
    for n, b, t in points:
        x1, x2, w = 2.0 * (n - 1), 2.0 * (n - 1) * b, 1.0 / (t * t)
        s11 += w * x1 * x1
        s12 += w * x1 * x2
        s22 += w * x2 * x2
        r1 += w * x1 * t
        r2 += w * x2 * t
    det = s11 * s22 - s12 * s12
    a = (r1 * s22 - r2 * s12) / det
    inv_beta = (s11 * r2 - s12 * r1) / det
    worst = max(abs(2 * (n - 1) * (a + b * inv_beta) - t) / t for n, b, t in points)
    return a, 1.0 / inv_beta, worst


def reduce_times(buckets, n, alpha, beta, ring):
    if ring:
        return [2 * (n - 1) * alpha + 2.0 * (n - 1) / n * b / beta for b in buckets]
    return [2 * (n - 1) * (alpha + b / beta) for b in buckets]


def predict_step(t1, window_frac, ready_frac, buckets, n, alpha, beta, ring):
    """Step time of n ranks: T1 plus what of the reduction runs past the last bucket's
    gradients; the buckets are reduced in order, each once ready and the one before is done."""
    r = reduce_times(buckets, n, alpha, beta, ring)
    w = window_frac * t1
    ready = [f * w for f in ready_frac] if len(ready_frac) == len(buckets) else \
        [w * k / max(1, len(buckets) - 1) for k in range(len(buckets))]
    end = 0.0
    for k, rk in enumerate(r):
        end = max(end, ready[k]) + rk
    exposed = end - ready[-1]
    total = sum(r)
    return t1 + exposed, exposed, total


def hidden_until(t1, wf, rf, buckets, alpha, beta, ring, nmax=4096):
    """The largest N (up to nmax) whose reduction but for the last bucket (which nothing can
    hide) runs at least 90% behind the backward; 1 where 2 ranks already do not."""
    last = 1
    for n in range(2, nmax + 1):
        step, exposed, total = predict_step(t1, wf, rf, buckets, n, alpha, beta, ring)
        rlast = reduce_times(buckets, n, alpha, beta, ring)[-1]
        hideable = total - rlast
        if hideable > 0 and (exposed - rlast) > 0.1 * hideable:
            return last
        last = n
    return last


def model_fit(results, models):
    pts = []
    for m in models:
        for r in results:
            if r["model"] != m["name"] or r["ranks"] < 2 or r["threads_per_rank"] != 1:
                continue
            # Bucket 0 is left out: rank 0 reduces it first, so its time holds the wait for the
            # slowest rank's backward (here every rank's host sees its buckets only once its whole
            # backward is done); the later buckets are ready on every rank by then.
            for k, t in enumerate(r["bucket_min_seconds"]):
                if k > 0:
                    pts.append((r["ranks"], m["buckets"][k], t))
    # the fastest time of each (ranks, bucket) over repeats
    best = {}
    for n, b, t in pts:
        key = (n, b)
        best[key] = min(best.get(key, t), t)
    pts = [(n, b, t) for (n, b), t in sorted(best.items())]
    alpha, beta, worst = fit_alpha_beta(pts)
    return {"alpha_s": alpha, "beta_bytes_per_s": beta, "worst_relative_residual": worst,
            "points": [{"ranks": n, "bucket_bytes": b, "seconds": t} for n, b, t in pts]}


def best_run(results, model, ranks, threads):
    runs = [r for r in results if r["model"] == model and r["ranks"] == ranks and
            r["threads_per_rank"] == threads]
    return max(runs, key=lambda r: r["samples_per_sec"]) if runs else None


def predictions(results, models, fit):
    out = []
    for m in models:
        one = best_run(results, m["name"], 1, 1)
        two = best_run(results, m["name"], 2, 1)
        t1 = one["later_step_seconds"]
        # the backward window and the buckets' ready times, as fractions (2 ranks, rank 0)
        wf = two["window_seconds_per_step"] / max(1e-12, two["device_busy_seconds_per_step"])
        rf = two["ready_fraction"]
        m["window_fraction"] = wf
        m["ready_fraction"] = rf
        b = one["global_batch"]
        for speed, tc in (("lavapipe, 1 thread", t1), ("50x faster", t1 / FAST)):
            for net, beta, alpha in NETWORKS:
                for ring in (False, True):
                    row = {"model": m["name"], "device": speed, "step_compute_s": tc,
                           "per_rank_batch": b, "network": net, "alpha_s": alpha,
                           "beta_bytes_per_s": beta,
                           "algorithm": "ring" if ring else "rank 0 (this implementation)",
                           "hidden_until_ranks": hidden_until(tc, wf, rf, m["buckets"], alpha, beta,
                                                              ring)}
                    for n in PREDICT_RANKS:
                        step, exposed, total = predict_step(tc, wf, rf, m["buckets"], n, alpha,
                                                            beta, ring)
                        row[str(n)] = {"step_s": step, "exposed_s": exposed, "reduction_s": total,
                                       "hidden_fraction": 1 - exposed / total if total else 1.0,
                                       "samples_per_sec": n * b / step,
                                       "efficiency": tc / step,
                                       # as measured here: nothing overlaps
                                       "step_no_overlap_s": tc + total,
                                       "efficiency_no_overlap": tc / (tc + total)}
                    out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# Output


def print_tables(doc):
    print("machine: %s, %d vCPUs; %s" % (doc["machine"]["cpu"], doc["machine"]["vcpus"],
                                         doc["note"]))
    print()
    hdr = ("| model | ranks x LP threads | global batch | step ms | samples/s | comm ms/step | "
           "reduction over ranks ms | hidden: engine | overlapped: trace | bytes/step rank 0 | "
           "of which over MPI | others' CPU |")
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for r in doc["table"]:
        mpi = r["mpi_bytes_per_step"]
        fmt = "| %s | %d x %d | %d | %.1f | %.1f | %.2f | %.2f | %s | %s | %.2f MiB | %s | %.0f%% |"
        print(fmt % (
            r["model"], r["ranks"], r["threads_per_rank"], r["global_batch"],
            1e3 * r["later_step_seconds"], r["samples_per_sec"], 1e3 * r["comm_seconds_per_step"],
            1e3 * r["reduce_seconds_per_step"],
            "%.0f%%" % (100 * r["engine_hidden_fraction"]) if r["ranks"] > 1 else "-",
            "%.0f%%" % (100 * r["overlapped_fraction"]) if r["ranks"] > 1 else "-",
            r["engine_bytes_moved_per_step"] / 2**20,
            "%.2f MiB" % (mpi / 2**20) if r["ranks"] > 1 else "-", 100 * r["others_cpu_share"]))
    f = doc["fit"]
    print()
    print("fit: alpha %.1f us, beta %.2f GB/s (loopback, Open MPI vader, CMA off), worst residual "
          "%.0f%% over %d points" % (1e6 * f["alpha_s"], f["beta_bytes_per_s"] / 1e9,
                                     100 * f["worst_relative_residual"], len(f["points"])))
    for m in doc["models"]:
        print("%s: %d parameters, buckets (KiB, last layers first) %s; T1 %.1f ms at batch %d; "
              "backward window %.0f%% of the device's step" % (
                  m["name"], m["parameters"], [round(b / 1024) for b in m["buckets"]],
                  1e3 * m["t1_s"], m["batch"], 100 * m["window_fraction"]))
    print()
    print("prediction (weak scaling, per-rank batch fixed):")
    print("| model | device | network | algorithm | N | reduction ms | step ms | samples/s | "
          "efficiency | reduction hidden | efficiency, no overlap | hidden up to N |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in doc["predictions"]:
        for n in PREDICT_RANKS:
            q = p[str(n)]
            fmt = "| %s | %s | %s | %s | %d | %.1f | %.1f | %.0f | %.0f%% | %.0f%% | %.0f%% | %s |"
            print(fmt % (
                p["model"], p["device"], p["network"], p["algorithm"], n, 1e3 * q["reduction_s"],
                1e3 * q["step_s"], q["samples_per_sec"], 100 * q["efficiency"],
                100 * q["hidden_fraction"], 100 * q["efficiency_no_overlap"],
                p["hidden_until_ranks"] if p["hidden_until_ranks"] < 4096 else ">4096"))


def summarize(results, models):
    table = []
    for m in models:
        configs = [(1, 1), (2, 1), (3, 1), (1, 2)]
        for ranks, threads in configs:
            r = best_run(results, m["name"], ranks, threads)
            if not r:
                continue
            r = dict(r)
            r["repeats"] = len([x for x in results if x["model"] == r["model"] and
                                x["ranks"] == ranks and x["threads_per_rank"] == threads])
            red = r["reduce_seconds_per_step"]
            r["engine_hidden_fraction"] = (r["engine_hidden_seconds_per_step"] /
                                           r["engine_comm_seconds_per_step"]
                                           if r["engine_comm_seconds_per_step"] else 0.0)
            r["overlapped_fraction"] = r["overlapped_seconds_per_step"] / red if red else 0.0
            # rank 0 sends and receives (N-1) dense buckets, and the step's loss (8 bytes)
            r["mpi_bytes_per_step"] = 2 * (ranks - 1) * (sum(m["buckets"]) + 8)
            table.append(r)
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--json", help="write everything measured and predicted here")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", type=int, default=5, help="start-up steps left out")
    ap.add_argument("--cnn-steps", type=int, default=50)
    ap.add_argument("--gpt-steps", type=int, default=30)
    ap.add_argument("--cnn-batch", type=int, default=64)
    ap.add_argument("--gpt-batch", type=int, default=8)
    ap.add_argument("--idle-wait", type=float, default=30)
    ap.add_argument("--fit-only", help="refit and print the runs of an earlier --json")
    a = ap.parse_args()
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.abspath(a.binary)
    models = []
    for name, steps, batch in (("fashion_cnn", a.cnn_steps, a.cnn_batch),
                               ("char_gpt", a.gpt_steps, a.gpt_batch)):
        params, buckets = buckets_of(binary, os.path.join(src, "assets", "models", name + ".json"))
        models.append({"name": name, "steps": steps, "batch": batch, "parameters": params,
                       "buckets": buckets})
    note = ("best of %d runs per configuration (shared machine); later steps only (after the "
            "first %d)" % (a.repeats, a.skip))
    if a.fit_only:
        with open(a.fit_only) as f:
            old = json.load(f)
        results, note = old["runs"], old["note"]
    else:
        results = []
        for rep in range(a.repeats):
            for m in models:
                for ranks, threads in ((1, 1), (2, 1), (3, 1), (1, 2)):
                    r = run_one(binary, src, m["name"], ranks, threads, m["batch"], m["steps"],
                                a.skip, a.idle_wait)
                    print("run %d: %s %d rank(s) x %d thread(s): %.1f samples/s, reduction %.2f "
                          "ms/step, others' CPU %.0f%%" % (
                              rep + 1, m["name"], ranks, threads, r["samples_per_sec"],
                              1e3 * r["reduce_seconds_per_step"], 100 * r["others_cpu_share"]),
                          file=sys.stderr)
                    results.append(r)
    for m in models:
        one = best_run(results, m["name"], 1, 1)
        m["t1_s"] = one["later_step_seconds"]
    fit = model_fit(results, models)
    doc = {
        "machine": {"cpu": cpu_model(), "vcpus": os.cpu_count()},
        "note": note,
        "models": models,
        "runs": results,
        "table": summarize(results, models),
        "fit": fit,
    }
    doc["predictions"] = predictions(results, models, fit)
    print_tables(doc)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
