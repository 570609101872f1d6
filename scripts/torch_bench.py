#!/usr/bin/python3
"""torch_bench.py: PyTorch CPU's training throughput on the same model and batch as
`vktrain bench train`, which runs it for `--baseline` (and docs/PERFORMANCE.md quotes it).

usage: /usr/bin/python3 scripts/torch_bench.py [MODEL.json] [--batch N] [--steps N] [--threads N]
           [--warmup N] [--optimizer sgd|adamw] [--lr X] [--momentum X] [--nesterov 0|1]
           [--weight-decay X] [--beta1 X] [--beta2 X] [--eps X] [--clip X]
           [--vktrain BINARY] [--json | --serve]
The module is the one `vktrain model MODEL.json --torch` writes (scripts/vkt_torch.py; --vktrain
names the binary, default build/vktrain).
The optimizer defaults are vktrain's (`vktrain train`'s): SGD lr 0.05 momentum 0.9; AdamW lr 1e-3,
betas 0.9/0.999, eps 1e-8, weight decay 0.01; --clip clips the global gradient norm as vktrain
does (0: off). `vktrain bench train --baseline` passes the optimizer its own run resolved.
Inputs are random: uniform [0, 1) floats, or for a model whose first layer is an embedding
(a language model: input [T] token ids) ids in [0, V). softmax_cross_entropy draws one class per
position (cross_entropy over logits.reshape(-1, classes): the mean over every position, as
vktrain computes it); mse a one-hot target.
Times the steps after --warmup (default 20) warm-up steps at 1 thread and at --threads (default
os.cpu_count()), each from the same parameters, with OMP_WAIT_POLICY=PASSIVE unless the
environment sets it, and keeps the faster: samples/s (tokens/s for a language model), the thread
count that won, each count's samples/s, the BLAS PyTorch was built against and the BLAS library it
loaded. --json prints one JSON object instead of a sentence.
--serve is how `vktrain bench train --baseline` runs it, for rounds that alternate with its own
steps: after --warmup steps at each thread count it prints one JSON line describing the run (as
--json, without a rate), then answers each line "run THREADS STEPS" on its standard input with
one untimed step and STEPS timed ones at that thread count, printed as a JSON line
{"threads": T, "samples_per_sec": R}; "quit" or the end of its input ends it.
Debian's python3-torch runs under Debian's /usr/bin/python3.
"""
import copy
import ctypes
import json
import os
import sys
import time

# Read by OpenMP when torch loads it: idle threads sleep instead of spinning, so the count that
# does not win (and vktrain beside it) is not charged for spinning workers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402 -- after OMP_WAIT_POLICY

import vkt_torch  # noqa: E402


def make_optimizer(params, opt):
    """The optimizer the flags name, with vktrain's defaults."""
    kind = opt.get("--optimizer", "sgd")
    if kind == "sgd":
        momentum = float(opt.get("--momentum", 0.9))
        return torch.optim.SGD(params, lr=float(opt.get("--lr", 0.05)), momentum=momentum,
                               nesterov=momentum > 0 and opt.get("--nesterov", "0") == "1",
                               weight_decay=float(opt.get("--weight-decay", 0)))
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=float(opt.get("--lr", 1e-3)),
                                 betas=(float(opt.get("--beta1", 0.9)),
                                        float(opt.get("--beta2", 0.999))),
                                 eps=float(opt.get("--eps", 1e-8)),
                                 weight_decay=float(opt.get("--weight-decay", 0.01)))
    raise SystemExit("torch_bench.py: --optimizer is sgd or adamw, not %r" % kind)


def describe(optimizer):
    """'SGD (lr 0.05, momentum 0.9, ...)' for reports."""
    g = optimizer.param_groups[0]
    if isinstance(optimizer, torch.optim.AdamW):
        return "AdamW (lr %g, betas %g/%g, eps %g, weight decay %g)" % (
            g["lr"], g["betas"][0], g["betas"][1], g["eps"], g["weight_decay"])
    return "SGD (lr %g, momentum %g%s, weight decay %g)" % (
        g["lr"], g["momentum"], ", nesterov" if g["nesterov"] else "", g["weight_decay"])


def blas_library():
    """The BLAS shared library this process has loaded (after the steps' products), resolved:
    a build with BLAS_INFO=generic calls whatever libblas.so.3 the system provides (on Debian the
    libblas.so.3 alternative: /usr/lib/x86_64-linux-gnu/blas/ is libblas3, netlib's reference
    BLAS; OpenBLAS's libblas.so.3 lives under openblas-pthread/). MKL when torch bundles it."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return "?"
    keys = ("blas", "mkl", "blis", "accelerate")
    found = sorted(os.path.realpath(p) for p in paths
                   if any(k in os.path.basename(p).lower() for k in keys))
    return ", ".join(dict.fromkeys(found)) or "none loaded (torch's own kernels)"


def blas_kind(libraries):
    """What the loaded BLAS is: "openblas <core>" (OpenBLAS's own name for the kernel it chose,
    openblas_get_corename, e.g. Zen or SkylakeX), "mkl", "reference" (netlib's libblas3, whose
    products are unoptimised: a baseline that is not comparable) or "unknown"."""
    for path in libraries.split(", "):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return "openblas " + lib.openblas_get_corename().decode()
        if "mkl" in os.path.basename(path):
            return "mkl"
        if "/blas/" in path or os.path.basename(path).startswith("libblas.so"):
            return "reference"
    return "unknown"


def main():
    args = sys.argv[1:]
    as_json = "--json" in args
    serve = "--serve" in args
    args = [a for a in args if a not in ("--json", "--serve")]
    model_path = "assets/models/fashion_mlp.json"
    if args and not args[0].startswith("--"):
        model_path, args = args[0], args[1:]
    opt = dict(zip(args[0::2], args[1::2]))
    batch, steps = int(opt.get("--batch", 128)), int(opt.get("--steps", 200))
    warmup = int(opt.get("--warmup", 20))
    clip = float(opt.get("--clip", 0))
    most = int(opt.get("--threads", os.cpu_count() or 1))
    vktrain = opt.get("--vktrain", os.path.join(os.path.dirname(__file__), "..", "build", "vktrain"))
    model, spec = vkt_torch.build(vktrain, model_path)
    optimizer = make_optimizer(model.parameters(), opt)
    first = spec["layers"][0] if spec.get("layers") else {}
    lm = first.get("type") == "embedding" and len(spec["input"]) == 1
    if lm:
        x = torch.randint(0, first["num_embeddings"], [batch] + spec["input"])
    else:
        x = torch.rand([batch] + spec["input"])
    with torch.no_grad():
        shape = list(model(x).shape)
    classes = shape[-1]
    if spec.get("loss") == "mse":
        target = torch.nn.functional.one_hot(torch.randint(0, classes, shape[:-1]), classes).float()

        def loss_of(out):
            return torch.nn.functional.mse_loss(out, target)
    else:
        target = torch.randint(0, classes, shape[:-1]).reshape(-1)  # one class per position

        def loss_of(out):
            return torch.nn.functional.cross_entropy(out.reshape(-1, classes), target)

    start = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())

    def step():
        optimizer.zero_grad()
        loss_of(model(x)).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()

    def timed(threads, warm, n):  # samples/s of n steps after warm untimed ones
        torch.set_num_threads(threads)
        for _ in range(warm):
            step()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return n * batch / (time.perf_counter() - t0)

    counts = sorted({1, max(most, 1)})
    cfg = torch.__config__.show()
    blas = cfg.split("BLAS_INFO=")[-1].split(",")[0].strip() if "BLAS_INFO" in cfg else "?"
    out = {"library": "pytorch", "version": torch.__version__,
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "blas": blas,
           "optimizer": describe(optimizer), "model": spec["name"], "batch": batch}
    if lm:
        out["tokens_per_sample"] = spec["input"][0]
    if serve:
        for threads in counts:
            torch.set_num_threads(threads)
            for _ in range(warmup):
                step()
        out["blas_library"] = blas_library()  # loaded by the warm-up's products
        out["blas_kind"] = blas_kind(out["blas_library"])
        out["comparable"] = out["blas_kind"] != "reference"
        print(json.dumps(out), flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            if words[0] != "run" or len(words) != 3:
                raise SystemExit("torch_bench.py --serve: expected 'run THREADS STEPS', got %r"
                                 % line)
            threads, n = int(words[1]), int(words[2])
            print(json.dumps({"threads": threads, "samples_per_sec": timed(threads, 1, n)}),
                  flush=True)
        return

    tried = {}
    for threads in counts:  # each count from the same parameters and optimizer state
        model.load_state_dict(start[0])
        optimizer.load_state_dict(start[1])
        tried[threads] = timed(threads, warmup, steps)
    threads = max(tried, key=tried.get)
    sps = tried[threads]
    out.update({"threads": threads, "threads_tried": {str(t): v for t, v in tried.items()},
                "blas_library": blas_library(), "steps": steps, "samples_per_sec": sps})
    out["blas_kind"] = blas_kind(out["blas_library"])
    out["comparable"] = out["blas_kind"] != "reference"
    if lm:
        out["tokens_per_sec"] = sps * spec["input"][0]
    if as_json:
        print(json.dumps(out))
    else:
        print("pytorch %s cpu, %d threads (of %s tried), BLAS %s, %s (%s), %s: %s batch %d: %.0f "
              "samples/s%s"
              % (torch.__version__, threads, "/".join(out["threads_tried"]), blas,
                 out["blas_kind"], out["blas_library"], out["optimizer"],
                 spec["name"], batch, sps,
                 " (%.0f tokens/s)" % out["tokens_per_sec"] if lm else ""))


if __name__ == "__main__":
    main()
