#!/usr/bin/env python3
"""The one-model, every-strategy table of docs/PARALLELISM.md, measured in one run.

Trains the same model for the same steps (Fashion-MNIST, file order) under each strategy on the
same devices, and prints, per device: the peak memory measured beside the planner's figure
(`vktrain plan --json`, the same flags), the bytes moved per step measured beside the planner's
formula (`bytes_communicated_per_step`: parallel/plan.h gives it for each strategy), the samples
per second and the busy fraction. Each configuration runs twice: a first run of 2 steps measures
the matmul choices of its shapes (a measurement's scratch would be in the first device's peak).
Usage: scripts/strategy_table.py BUILD/vktrain [--model M] [--devices 0,0,0,0] [--steps N]
       [--batch B] [--optimizer adamw] [--micro-batches M]
"""
import argparse
import json
import subprocess
import sys


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    return last_json(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vktrain")
    ap.add_argument("--model", default="assets/models/fashion_mlp.json")
    ap.add_argument("--devices", default="llvmpipe,llvmpipe,llvmpipe,llvmpipe")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--micro-batches", type=int, default=4)
    a = ap.parse_args()
    n = len(a.devices.split(","))
    base = ["--model", a.model, "--batch", str(a.batch), "--optimizer", a.optimizer]
    configs = [
        ("single", ["--device", a.devices.split(",")[0], "--strategy", "single"], "single"),
        ("replicated", ["--device", a.devices, "--strategy", "replicated"], "replicated"),
        ("replicated + --shard-optimizer",
         ["--device", a.devices, "--strategy", "replicated", "--shard-optimizer"],
         "replicated+shard-optimizer"),
        ("layers, %d micro-batches" % a.micro_batches,
         ["--device", a.devices, "--strategy", "layers", "--micro-batches", str(a.micro_batches)],
         "layers"),
        ("tensor", ["--device", a.devices, "--strategy", "tensor"], "tensor"),
    ]
    if n >= 4 and n % 2 == 0:
        configs += [
            ("layers,tensor (%d stages of 2), %d micro-batches" % (n // 2, a.micro_batches),
             ["--device", a.devices, "--strategy", "layers,tensor", "--tensor-size", "2",
              "--micro-batches", str(a.micro_batches)], "layers,tensor"),
            ("replicated,tensor (%d replicas of 2)" % (n // 2),
             ["--device", a.devices, "--strategy", "replicated,tensor", "--tensor-size", "2"],
             "replicated,tensor"),
        ]
    model = json.loads(subprocess.run([a.vktrain, "model", a.model, "--json"], capture_output=True,
                                      text=True, check=True).stdout)
    print("%s, batch %d, %s, %d steps, devices %s (%d)\n" % (model["name"], a.batch, a.optimizer,
                                                          a.steps, a.devices, n))
    print("| strategy | device | peak memory (planned) | moved per step (formula) | samples/s |"
          " busy |")
    print("|---|---|---|---|---|---|")
    for name, flags, plan_name in configs:
        plan = run([a.vktrain, "plan"] + base + flags + ["--json"])
        plans = {s["strategy"]: s for s in plan["strategies"]}
        p = plans.get(plan_name)
        # One epoch longer than the steps, so that no evaluation runs (it would add its
        # reductions to tensor's bytes); a first run of 2 steps measures the matmul choices of
        # these shapes (its scratch would be in the first device's peak otherwise).
        limits = ["--epochs", "1", "--no-shuffle", "--limit-train", str((a.steps + 1) * a.batch),
                  "--limit-test", str(a.batch), "--json"]
        run([a.vktrain, "train"] + base + flags + limits + ["--max-steps", "2"])
        train = run([a.vktrain, "train"] + base + flags + limits + ["--max-steps", str(a.steps)])
        steps = train["steps"]
        for d, dev in enumerate(train["devices"]):
            pd = p["devices"][d] if p and d < len(p["devices"]) else None
            planned = pd["bytes_needed"] if pd else None
            formula = pd.get("bytes_communicated_per_step") if pd else None
            moved = dev["bytes_moved"] / steps
            print("| %s | %s | %.2f MiB (%s) | %.2f MiB (%s) | %.0f | %.0f%% |" % (
                name if d == 0 else "", dev["device"].split(" (")[0],
                dev["peak_memory_bytes"] / 2**20,
                "%.2f MiB" % (planned / 2**20) if planned is not None else "-",
                moved / 2**20, "%.2f MiB" % (formula / 2**20) if formula is not None else "-",
                train["samples_per_sec"], 100 * dev["busy_fraction"]))


if __name__ == "__main__":
    main()
