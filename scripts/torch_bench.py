#!/usr/bin/python3
"""torch_bench.py: PyTorch CPU's training throughput on the same model and batch as
`vktrain bench train`, which runs it for `--baseline` (and docs/PERFORMANCE.md quotes it).

usage: /usr/bin/python3 scripts/torch_bench.py [MODEL.json] [--batch N] [--steps N] [--threads N]
                                               [--json]
Times SGD (momentum 0.9, lr 0.05) steps on random inputs after 20 warm-up steps: samples/s,
and the BLAS PyTorch was built against. --json prints one JSON object instead of a sentence.
Debian's python3-torch runs under Debian's /usr/bin/python3.
"""
import json
import sys
import time

import torch


def build(spec):
    layers, width = [], spec["input"][0]
    acts = {"relu": lambda l: torch.nn.ReLU(), "tanh": lambda l: torch.nn.Tanh(),
            "sigmoid": lambda l: torch.nn.Sigmoid(),
            "gelu": lambda l: torch.nn.GELU(approximate="tanh"),
            "leaky_relu": lambda l: torch.nn.LeakyReLU(l.get("negative_slope", 0.01))}
    for l in spec["layers"]:
        if l["type"] == "dense":
            layers.append(torch.nn.Linear(width, l["units"]))
            width = l["units"]
        else:
            layers.append(acts[l["type"]](l))
    return torch.nn.Sequential(*layers), width


def main():
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    model_path = "assets/models/fashion_mlp.json"
    if args and not args[0].startswith("--"):
        model_path, args = args[0], args[1:]
    opt = dict(zip(args[0::2], args[1::2]))
    batch, steps = int(opt.get("--batch", 128)), int(opt.get("--steps", 200))
    torch.set_num_threads(int(opt.get("--threads", 2)))
    spec = json.load(open(model_path))
    model, width = build(spec)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(batch, spec["input"][0])
    mse = spec.get("loss") == "mse"
    y = torch.randint(0, width, (batch,))
    target = torch.nn.functional.one_hot(y, width).float() if mse else y
    loss_fn = torch.nn.functional.mse_loss if mse else torch.nn.functional.cross_entropy
    for i in range(steps + 20):
        if i == 20:
            t0 = time.perf_counter()
        sgd.zero_grad()
        loss_fn(model(x), target).backward()
        sgd.step()
    dt = time.perf_counter() - t0
    cfg = torch.__config__.show()
    blas = cfg.split("BLAS_INFO=")[-1].split(",")[0] if "BLAS_INFO" in cfg else "?"
    sps = steps * batch / dt
    if as_json:
        print(json.dumps({"library": "pytorch", "version": torch.__version__,
                          "threads": torch.get_num_threads(), "blas": blas, "model": spec["name"],
                          "batch": batch, "steps": steps, "samples_per_sec": sps}))
    else:
        print("pytorch %s cpu, %d threads, BLAS %s: %s batch %d: %.0f samples/s"
              % (torch.__version__, torch.get_num_threads(), blas, spec["name"], batch, sps))


if __name__ == "__main__":
    main()
