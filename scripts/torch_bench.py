#!/usr/bin/python3
"""torch_bench.py: PyTorch CPU's training throughput on the same MLP and batch as
`vktrain bench train`, for the comparison in docs/PERFORMANCE.md.

usage: /usr/bin/python3 scripts/torch_bench.py [MODEL.json] [--batch N] [--steps N] [--threads N]
Prints samples/s of SGD (momentum 0.9) steps on random inputs, after a warm-up, and the BLAS
PyTorch uses. Debian's python3-torch runs under Debian's /usr/bin/python3.
"""
import json
import sys
import time

import torch


def main():
    args = sys.argv[1:]
    model_path = args[0] if args and not args[0].startswith("--") else "assets/models/fashion_mlp.json"
    opt = dict(zip(args[1::2] if args and not args[0].startswith("--") else args[0::2],
                   args[2::2] if args and not args[0].startswith("--") else args[1::2]))
    batch, steps = int(opt.get("--batch", 128)), int(opt.get("--steps", 200))
    torch.set_num_threads(int(opt.get("--threads", 2)))
    spec = json.load(open(model_path))
    layers, width = [], spec["input"][0]
    for l in spec["layers"]:
        if l["type"] == "dense":
            layers.append(torch.nn.Linear(width, l["units"]))
            width = l["units"]
        else:
            layers.append({"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid,
                           "gelu": lambda: torch.nn.GELU(approximate="tanh")}[l["type"]]())
    model = torch.nn.Sequential(*layers)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(batch, spec["input"][0])
    y = torch.randint(0, width, (batch,))
    for i in range(steps + 20):
        if i == 20:
            t0 = time.perf_counter()
        sgd.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        sgd.step()
    dt = time.perf_counter() - t0
    blas = torch.__config__.show().split("BLAS_INFO=")[-1].split(",")[0] if "BLAS_INFO" in torch.__config__.show() else "?"
    print("pytorch %s cpu, %d threads, BLAS %s: %s batch %d: %.0f samples/s"
          % (torch.__version__, torch.get_num_threads(), blas, spec["name"], batch, steps * batch / dt))


if __name__ == "__main__":
    main()
