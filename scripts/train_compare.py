#!/usr/bin/python3
"""train_compare.py: the README's main job end to end, vktrain beside PyTorch CPU, in one run.

vktrain runs `vktrain train --model MODEL --device DEVICE --json` (Fashion-MNIST from Debian's
dataset-fashion-mnist, 3 epochs of batch 128, shuffled every epoch, SGD lr 0.05 momentum 0.9, the
test set evaluated after every epoch). PyTorch runs the same recipe: the module `vktrain model
--torch` writes (scripts/vkt_torch.py), the same files read and scaled by 1/255, the same
optimizer, a new permutation of the training set every epoch (the last batch partial, as
vktrain's), the test set through the model after every epoch. PyTorch runs at 1 thread and at
all cores (OMP_WAIT_POLICY=PASSIVE unless set), each as its own process, and the faster by wall
time is kept: the best configuration this machine runs, with the BLAS it loaded named
(torch_bench.py's blas_library/blas_kind; on netlib's reference BLAS the ratio is marked not
comparable).

Both sides are timed from the outside as whole processes (start-up, reading the data, every
epoch's training and evaluation), and each reports its own training throughput (samples/s over
the steps) and test accuracy.

usage: /usr/bin/python3 scripts/train_compare.py [--vktrain build/vktrain] [--device llvmpipe]
           [--model assets/models/fashion_mlp.json] [--epochs 3] [--batch 128] [--json]
Prints one line per run and the ratio; --json prints one JSON object instead.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


def torch_run(opt):
    """The recipe in this process (--torch-run): prints one JSON line."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    sys.path.insert(0, HERE)
    import torch_bench
    import vkt_torch
    threads, batch, epochs = int(opt["--threads"]), int(opt["--batch"]), int(opt["--epochs"])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model, spec = vkt_torch.build(opt["--vktrain"], opt["--model"])
    optimizer = torch_bench.make_optimizer(model.parameters(), {})
    t_data = time.perf_counter()
    split = {}
    for part, prefix in (("train", "train"), ("test", "t10k")):
        x = vkt_torch.read_idx(os.path.join(DATA, "%s-images-idx3-ubyte.gz" % prefix))
        y = vkt_torch.read_idx(os.path.join(DATA, "%s-labels-idx1-ubyte.gz" % prefix))
        x = torch.from_numpy(x.astype("float32")) / 255.0
        split[part] = (x.reshape([x.shape[0]] + spec["input"]), torch.from_numpy(y.astype("int64")))
    data_s = time.perf_counter() - t_data
    x, y = split["train"]
    xt, yt = split["test"]
    n = x.shape[0]
    step_s, accuracy = 0.0, 0.0
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(n)
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
        step_s += time.perf_counter() - t0
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, xt.shape[0], batch):
                correct += int((model(xt[i:i + batch]).argmax(1) == yt[i:i + batch]).sum())
        accuracy = correct / xt.shape[0]
    libs = torch_bench.blas_library()
    print(json.dumps({"threads": threads, "samples_per_sec": epochs * n / step_s,
                      "data_seconds": data_s, "test_accuracy": accuracy,
                      "optimizer": torch_bench.describe(optimizer), "blas_library": libs,
                      "blas_kind": torch_bench.blas_kind(libs), "version": torch.__version__,
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}))


def timed(cmd):
    """(seconds, the last line of stdout as JSON) of a command that must succeed."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("train_compare.py: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                             r.stdout[-2000:], r.stderr[-2000:]))
    return wall, json.loads(r.stdout.strip().splitlines()[-1])


def main():
    args = [a for a in sys.argv[1:] if a not in ("--json", "--torch-run")]
    opt = {"--vktrain": os.path.join(HERE, "..", "build", "vktrain"), "--device": "llvmpipe",
           "--model": os.path.join(HERE, "..", "assets", "models", "fashion_mlp.json"),
           "--epochs": "3", "--batch": "128"}
    opt.update(dict(zip(args[0::2], args[1::2])))
    if "--torch-run" in sys.argv:
        return torch_run(opt)
    vk_wall, vk = timed([opt["--vktrain"], "train", "--model", opt["--model"], "--device",
                         opt["--device"], "--epochs", opt["--epochs"], "--batch", opt["--batch"],
                         "--json", "--quiet"])
    runs = []
    for threads in sorted({1, os.cpu_count() or 1}):
        wall, res = timed(["/usr/bin/python3", os.path.abspath(__file__), "--torch-run",
                           "--threads", str(threads)] +
                          [a for k in ("--vktrain", "--model", "--epochs", "--batch")
                           for a in (k, opt[k])])
        res["wall_seconds"] = wall
        runs.append(res)
    best = min(runs, key=lambda r: r["wall_seconds"])
    comparable = best["blas_kind"] != "reference"
    out = {"vktrain": {"device": vk.get("device", opt["--device"]), "wall_seconds": vk_wall,
                       "samples_per_sec": vk.get("samples_per_sec"),
                       "test_accuracy": vk.get("test_accuracy"),
                       "first_step_seconds": vk.get("first_step_seconds")},
           "pytorch": best, "pytorch_tried": runs, "comparable": comparable,
           "ratio_wall": best["wall_seconds"] / vk_wall,
           "ratio_samples_per_sec": vk.get("samples_per_sec", 0) / best["samples_per_sec"]}
    if "--json" in sys.argv:
        print(json.dumps(out))
        return 0
    print("vktrain train on %s: %.1f s, %.0f samples/s in the steps, test accuracy %.4f"
          % (out["vktrain"]["device"], vk_wall, vk.get("samples_per_sec", 0),
             vk.get("test_accuracy", 0)))
    for r in runs:
        print("PyTorch %s CPU, %d thread%s (%s, %s): %.1f s, %.0f samples/s in the steps, "
              "test accuracy %.4f%s" % (r["version"], r["threads"], "" if r["threads"] == 1 else "s",
                                        r["blas_kind"], r["blas_library"], r["wall_seconds"],
                                        r["samples_per_sec"], r["test_accuracy"],
                                        "  <- best" if r is best else ""))
    print("vktrain / PyTorch's best: %.2fx by wall time, %.2fx by samples/s in the steps%s"
          % (out["ratio_wall"], out["ratio_samples_per_sec"],
             "" if comparable else "  (NOT COMPARABLE: PyTorch ran on netlib's reference BLAS; "
             "apt-get install libopenblas0-pthread)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
