#!/usr/bin/python3
"""lm_compare.py: a byte-level language model trained on a text corpus by vktrain and by PyTorch
with the same recipe, from the same initial parameters, on the same batches; both validation
losses after the same number of steps, and a sample `vktrain generate` prints.

usage: /usr/bin/python3 scripts/lm_compare.py [--model assets/models/char_gpt.json]
           [--steps 300] [--batch 32] [--lr 0.001] [--warmup 20] [--lr-min 0] [--weight-decay 0.01]
           [--seed 1] [--device llvmpipe] [--text DIR_OR_FILE] [--limit-test N] [--threads N]
           [--vktrain build/vktrain] [--work DIR] [--json OUT.json]

The recipe: AdamW (betas 0.9, 0.999, eps 1e-8), --lr with --warmup steps of linear warmup and
then a cosine decay to --lr-min over the run (torch's SequentialLR(LinearLR, CosineAnnealingLR),
vktrain's --lr-schedule cosine --warmup-steps), no clipping, dropout 0. vktrain reads the corpus
with --data-text (Debian's fortunes by default) and draws one epoch of --steps x --batch random
windows of T + 1 bytes from its seeded generator (--limit-train); this script reads the same
bytes in the same order, holds out the same last tenth and draws the same windows with the same
generator (engine/run/data.c: splitmix64 and a bias-free bound, per window), so the two runs see
the same batches, and PyTorch starts from the parameters it wrote for vktrain's --init.
Validation: the loss (mean over every position) of the same non-overlapping windows of the held-
out tenth (all of them, or the first --limit-test). It also evaluates vktrain's final parameters in
PyTorch, which separates a difference of training from one of evaluation.
"""
import json
import warnings
import os
import stat
import subprocess
import sys
import time

import numpy as np
import torch

import vkt_torch

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def below(state, bound):
    """engine/run/data.c's below(): splitmix64 draws, the top sliver of 2^64 rejected."""
    limit = M64 - M64 % bound
    while True:
        state = (state + 0x9e3779b97f4a7c15) & M64
        r = mix64(state)
        if r < limit:
            return r % bound


def window_start(seed, epoch, j, train_n, T):
    """vkt_batcher_window: where window j of an epoch starts."""
    state = mix64(seed ^ mix64((epoch + 0x6a09e667f3bcc909) & M64) ^
                  mix64((j + 0xbb67ae8584caa73b) & M64))
    return below(state, train_n - T)


def read_corpus(paths):
    """vkt_text_load: files as they are; a directory's regular files in sorted name order,
    symbolic links, subdirectories and fortune's .dat files skipped."""
    out = bytearray()
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                f = os.path.join(p, name)
                if name.endswith(".dat") or not stat.S_ISREG(os.lstat(f).st_mode):
                    continue
                out += open(f, "rb").read()
        else:
            out += open(p, "rb").read()
    return bytes(out)


def val_loss(model, val, T, batch):
    """Mean cross-entropy over every position of the validation windows."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(val), batch):
            w = torch.from_numpy(val[i:i + batch])
            logits = model(w[:, :T].float())
            total += float(torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"))
            count += w.shape[0] * T
    model.train()
    return total / count


def main():
    args = sys.argv[1:]
    opt = dict(zip(args[0::2], args[1::2]))
    here = os.path.dirname(os.path.abspath(__file__))
    model_path = opt.get("--model", os.path.join(here, "..", "assets/models/char_gpt.json"))
    steps, batch = int(opt.get("--steps", 300)), int(opt.get("--batch", 32))
    lr, warmup = float(opt.get("--lr", 0.001)), int(opt.get("--warmup", 20))
    lr_min, wd = float(opt.get("--lr-min", 0)), float(opt.get("--weight-decay", 0.01))
    seed, device = int(opt.get("--seed", 1)), opt.get("--device", "llvmpipe")
    text = opt.get("--text", "/usr/share/games/fortunes")
    limit_test = int(opt.get("--limit-test", 0))
    vktrain = opt.get("--vktrain", os.path.join(here, "..", "build", "vktrain"))
    work = opt.get("--work", "/tmp/lm_compare")
    threads = int(opt.get("--threads", os.cpu_count()))
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", message="The epoch parameter")  # torch SequentialLR itself

    corpus = read_corpus([text])
    n = len(corpus)
    train_n = n - n // 10
    torch.manual_seed(seed)
    model, spec = vkt_torch.build(vktrain, model_path)
    T = spec["input"][0]
    ids = np.frombuffer(corpus, dtype=np.uint8).astype(np.int64)
    count = (n - train_n - 1) // T
    if limit_test:
        count = min(count, limit_test)
    val = np.stack([ids[train_n + k * T:train_n + k * T + T + 1] for k in range(count)])
    windows = min((train_n - 1) // T, steps * batch)
    if windows < steps * batch:
        sys.exit("lm_compare: the corpus has %d training windows, fewer than %d steps x %d"
                 % (windows, steps, batch))

    name = spec["name"]
    init_path = os.path.join(work, "%s_init.safetensors" % name)
    vkt_torch.write_safetensors(init_path, model.state_dict())

    # vktrain first, alone on the machine.
    ck = os.path.join(work, "%s_vktrain.safetensors" % name)
    metrics = os.path.join(work, "%s_vktrain.jsonl" % name)
    cmd = [vktrain, "train", "--model", model_path, "--init", init_path, "--data-text", text,
           "--device", device, "--batch", str(batch), "--epochs", "1", "--limit-train",
           str(steps * batch), "--seed", str(seed), "--optimizer", "adamw", "--lr", repr(lr),
           "--weight-decay", repr(wd), "--lr-schedule", "cosine", "--warmup-steps", str(warmup),
           "--lr-min", repr(lr_min), "--save", ck, "--metrics", metrics, "--json", "--quiet"]
    if limit_test:
        cmd += ["--limit-test", str(limit_test)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    vk_seconds = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("lm_compare: %s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    vk = json.loads(r.stdout.strip().splitlines()[-1])
    with open(os.path.join(work, "%s_vktrain.json" % name), "w") as f:
        f.write(r.stdout.strip().splitlines()[-1] + "\n")
    vk_lrs = [json.loads(line)["lr"] for line in open(metrics) if '"type":"step"' in line]

    # PyTorch: the same windows, in the same order.
    starts = [window_start(seed, 0, j, train_n, T) for j in range(steps * batch)]
    adamw = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                              weight_decay=wd)
    warm = torch.optim.lr_scheduler.LinearLR(adamw, start_factor=1.0 / (warmup + 1),
                                             end_factor=1.0, total_iters=warmup)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(adamw, T_max=steps - warmup, eta_min=lr_min)
    sched = torch.optim.lr_scheduler.SequentialLR(adamw, [warm, cos], milestones=[warmup])
    lr_gap = 0.0
    t0 = time.perf_counter()
    for s in range(steps):
        w = torch.from_numpy(np.stack([ids[p:p + T + 1] for p in starts[s * batch:(s + 1) * batch]]))
        lr_gap = max(lr_gap, abs(adamw.param_groups[0]["lr"] - vk_lrs[s]) / lr)
        adamw.zero_grad()
        logits = model(w[:, :T].float())
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 w[:, 1:].reshape(-1))
        loss.backward()
        adamw.step()
        sched.step()
    torch_seconds = time.perf_counter() - t0
    torch_val = val_loss(model, val, T, 64)
    torch_train_last = float(loss)

    # vktrain's final parameters, evaluated by PyTorch.
    model.load_state_dict(vkt_torch.read_safetensors(ck), strict=True)
    vk_params_torch_val = val_loss(model, val, T, 64)

    gen = [vktrain, "generate", "--init", ck, "--model", model_path, "--device", device,
           "--prompt", "The ", "--tokens", "300", "--temperature", "0.8", "--top-k", "40",
           "--seed", "1"]
    g = subprocess.run(gen, capture_output=True)
    sample = g.stdout.decode("utf-8", "replace") if g.returncode == 0 else None

    res = {"model": name, "corpus": text, "corpus_bytes": n, "train_bytes": train_n,
           "validation_windows": int(count), "T": T, "steps": steps, "batch": batch,
           "tokens_trained": steps * batch * T, "lr": lr, "warmup": warmup, "seed": seed,
           "device": vk.get("device"), "vktrain_val_loss": vk["test_loss"],
           "torch_val_loss": torch_val, "difference_nats": vk["test_loss"] - torch_val,
           "vktrain_params_torch_val_loss": vk_params_torch_val,
           "vktrain_train_loss_last_step": json.loads(open(metrics).read().splitlines()[steps - 1])
           ["loss"], "torch_train_loss_last_step": torch_train_last,
           "max_lr_difference_relative": lr_gap, "vktrain_seconds": vk_seconds,
           "torch_seconds_train": torch_seconds, "torch_threads": threads,
           "torch_version": torch.__version__, "generate_command": " ".join(gen),
           "sample": sample}
    print("%s on %s: %d steps x %d windows of %d bytes (%d tokens), AdamW lr %g, warmup %d + "
          "cosine" % (name, text, steps, batch, T, steps * batch * T, lr, warmup))
    print("  validation loss (%d windows): vktrain %.4f (on %s, %.1f min), PyTorch %.4f "
          "(%d threads, %.1f min): difference %+.4f nats" %
          (count, vk["test_loss"], vk.get("device"), vk_seconds / 60, torch_val, threads,
           torch_seconds / 60, vk["test_loss"] - torch_val))
    print("  vktrain's parameters evaluated by PyTorch: %.4f; rates differ by at most %.2g of lr"
          % (vk_params_torch_val, lr_gap))
    if sample is not None:
        print("  %s\n%s" % (" ".join(gen), sample))
    else:
        print("  generate failed: %s" % g.stderr.decode("utf-8", "replace"))
    if "--json" in opt:
        with open(opt["--json"], "w") as f:
            json.dump(res, f, indent=1)
    return 0 if abs(vk["test_loss"] - torch_val) <= 0.05 and sample is not None else 1


if __name__ == "__main__":
    sys.exit(main())
