#!/usr/bin/python3
"""torch_bench.py: PyTorch CPU's training throughput on the same model and batch as
`vktrain bench train`, which runs it for `--baseline` (and docs/PERFORMANCE.md quotes it).

usage: /usr/bin/python3 scripts/torch_bench.py [MODEL.json] [--batch N] [--steps N] [--threads N]
                                               [--vktrain BINARY] [--json]
The module is the one `vktrain model MODEL.json --torch` writes (scripts/vkt_torch.py; --vktrain
names the binary, default build/vktrain).
Times SGD (momentum 0.9, lr 0.05) steps on random inputs after 20 warm-up steps: samples/s,
and the BLAS PyTorch was built against. --json prints one JSON object instead of a sentence.
Debian's python3-torch runs under Debian's /usr/bin/python3.
"""
import json
import os
import sys
import time

import torch

import vkt_torch


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
    vktrain = opt.get("--vktrain", os.path.join(os.path.dirname(__file__), "..", "build", "vktrain"))
    model, spec = vkt_torch.build(vktrain, model_path)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand([batch] + spec["input"])
    with torch.no_grad():
        width = model(x).shape[-1]
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
