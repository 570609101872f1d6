#!/usr/bin/env python3
"""Where a CPU Vulkan driver's JIT code spends its time (lavapipe, x86-64).

Runs a command, samples it with perf (cpu-clock: no hardware counters needed) after a delay, dumps
the process's anonymous executable mappings (the driver's JIT code) with gdb, and reports:
  - the samples in each JIT function (a function starts at `push %rbp` after a ret or jmp, or at
    the target of a call: lavapipe's texel-fetch functions) and in its loops (backward jumps) with
    at least --min-share of the samples, and the samples outside the JIT code;
  - for each such loop, its opcodes' static counts and samples, and its longest straight-line run
    of vector instructions whose only memory operands are %rsp-relative, with the command that
    times that run alone (scripts/jit_chunk_rate.c): what the loop's arithmetic costs without its
    texel fetches, calls and branches.

  scripts/jit_profile.py --delay 6 --seconds 5 --out /tmp/jp -- \\
      build/vktrain bench train --device llvmpipe --steps 3000
  scripts/jit_profile.py --report --out /tmp/jp     # the report again, from the files kept there

(`bench matmul` runs the driver's peak_fma shader after each timed product: its loop shows too.)

Needs perf, gdb and objdump (Debian: linux-perf, gdb, binutils) and ptrace rights over the child
(run as root, or kernel.yama.ptrace_scope = 0). docs/PERFORMANCE.md (twelfth pass) used it.
"""
import argparse
import bisect
import collections
import itertools
import os
import re
import shutil
import subprocess
import sys
import time


def die(msg):
    print(f"jit_profile: {msg}", file=sys.stderr)
    sys.exit(1)


def disassemble(path, base):
    """[(address, opcode, operands)] of the raw x86-64 code in path, loaded at base."""
    out = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64",
                          f"--adjust-vma={base:#x}", path],
                         capture_output=True, text=True, check=True).stdout
    ins = []
    for line in out.split("\n"):
        m = re.match(r"\s+([0-9a-f]+):\t(?:[0-9a-f]{2} )+\s*\t(\S+)\s*(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return ins


def functions(ins, lo, hi):
    """Start addresses of the functions in ins (a mapping [lo, hi)): `push %rbp` after a ret, jmp
    or padding, and the targets of calls through a register loaded with an address inside the
    mapping (lavapipe's texel-fetch functions, which have no frame)."""
    pad = ("nop", "nopw", "nopl", "xchg", "int3", "cs")
    at = {x[0] for x in ins}
    starts = {ins[0][0]} if ins else set()
    loaded = {}
    for i in range(1, len(ins)):
        addr, op, args = ins[i]
        if op == "push" and args == "%rbp":
            j = i - 1
            while j > 0 and (ins[j][1] in pad or ins[j][1].startswith("data16")):
                j -= 1
            if ins[j][1] in ("ret", "jmp", "ud2") or ins[j][1].startswith("data16"):
                starts.add(addr)
        m = re.match(r"\$(0x[0-9a-f]+),(%r[a-z0-9]+)$", args)
        if op == "movabs" and m:
            loaded[m.group(2)] = int(m.group(1), 16)
        m = re.match(r"\*(%r[a-z0-9]+)$", args)
        if op == "call" and m and lo <= loaded.get(m.group(1), -1) < hi:
            if loaded[m.group(1)] in at:
                starts.add(loaded[m.group(1)])
    return sorted(starts)


def straight_run(ins):
    """(lo, hi, n) of the longest run of vector instructions without control flow whose memory
    operands are all %rsp-relative and that name no general register."""
    best, cur = (0, 0, 0), None
    for k, (addr, op, args) in enumerate(ins):
        plain = args.replace("(%rsp)", "")
        ok = (op.startswith("v") and ("(" not in args or "(%rsp)" in args)
              and not re.search(r"%[re][a-z0-9]+", plain))
        if ok:
            cur = (addr, k) if cur is None else cur
            n = k - cur[1] + 1
            if n > best[2]:
                end = ins[k + 1][0] if k + 1 < len(ins) else addr + 1
                best = (cur[0], end, n)
        else:
            cur = None
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delay", type=float, default=5.0, help="seconds before sampling starts")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds of sampling")
    ap.add_argument("--out", default="jit-profile", help="folder for perf.data and the dumps")
    ap.add_argument("--min-share", type=float, default=1.0,
                    help="report functions and loops with at least this percentage of the samples")
    ap.add_argument("--report", action="store_true",
                    help="no command: report again on what --out already holds")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd and not a.report:
        die("no command to profile (give it after --), and no --report")
    for tool in ("perf", "gdb", "objdump"):
        if not shutil.which(tool):
            die(f"{tool} not found: install linux-perf, gdb and binutils")
    data = os.path.join(a.out, "perf.data")
    if a.report:
        maps = []
        for name in sorted(os.listdir(a.out) if os.path.isdir(a.out) else []):
            m = re.match(r"jit_([0-9a-f]+)\.bin$", name)
            if m:
                path = os.path.join(a.out, name)
                lo = int(m.group(1), 16)
                maps.append((lo, lo + os.path.getsize(path), path))
        if not os.path.exists(data) or not maps:
            die(f"{a.out} holds no perf.data and jit_*.bin of an earlier run")
        report(a, data, maps)
        return
    os.makedirs(a.out, exist_ok=True)
    for name in os.listdir(a.out):  # an earlier run's dumps would join this run's report
        if re.match(r"jit_[0-9a-f]+\.bin$", name) or name == "perf.data":
            os.remove(os.path.join(a.out, name))
    log = open(os.path.join(a.out, "command.log"), "w")
    try:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    except OSError as e:
        die(f"cannot run {cmd[0]}: {e.strerror}")
    try:
        time.sleep(a.delay)
        if child.poll() is not None:
            die(f"the command ended (status {child.returncode}) before sampling began: "
                f"shorten --delay or lengthen the run ({a.out}/command.log)")
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", data,
                            "-p", str(child.pid), "--", "sleep", str(a.seconds)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            die(f"perf record failed: {r.stderr.strip()}")
        maps = []
        with open(f"/proc/{child.pid}/maps") as f:
            for line in f:
                p = line.split()
                if p[1] == "r-xp" and p[3] == "00:00" and p[4] == "0" and len(p) == 5:
                    lo, hi = (int(x, 16) for x in p[0].split("-"))
                    maps.append((lo, hi, os.path.join(a.out, f"jit_{lo:x}.bin")))
        gdb = ["gdb", "-p", str(child.pid), "-batch"]
        for lo, hi, path in maps:
            gdb += ["-ex", f"dump memory {path} {lo:#x} {hi:#x}"]
        subprocess.run(gdb, capture_output=True, text=True)
    finally:
        child.kill()
        child.wait()
    report(a, data, maps)


def report(a, data, maps):
    """The report on perf.data's samples and the dumped mappings [(lo, hi, path)]."""
    ips = collections.Counter()
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip"], capture_output=True,
                         text=True).stdout
    for line in out.split():
        try:
            ips[int(line, 16)] += 1
        except ValueError:
            pass
    total = sum(ips.values())
    if total == 0:
        die("perf recorded no samples")
    addrs = sorted(ips)
    upto = list(itertools.accumulate(ips[k] for k in addrs))

    def samples(lo, hi):
        """The samples at addresses in [lo, hi)."""
        i, j = bisect.bisect_left(addrs, lo), bisect.bisect_left(addrs, hi)
        return (upto[j - 1] if j else 0) - (upto[i - 1] if i else 0)

    in_jit = 0
    loops = []  # (samples, map path, map base, loop lo, loop hi, instructions)
    print(f"{total} samples; JIT mappings: {len(maps)}")
    for lo, hi, path in maps:
        if not os.path.exists(path):
            print(f"  {lo:#x}: not dumped (gdb could not attach: ptrace rights?)")
            continue
        n_map = samples(lo, hi)
        in_jit += n_map
        if n_map < total * a.min_share / 100:
            continue
        ins = disassemble(path, lo)
        starts = functions(ins, lo, hi) + [hi]
        for f0, f1 in zip(starts, starts[1:]):
            n = samples(f0, f1)
            if n < total * a.min_share / 100:
                continue
            print(f"  function {f0 - lo:#x}-{f1 - lo:#x} of map {lo:#x} ({(f1 - f0) // 1024} KB): "
                  f"{n} samples, {100 * n / total:.1f}%")
            body = [x for x in ins if f0 <= x[0] < f1]
            for addr, op, args in body:
                m = re.match(r"(0x[0-9a-f]+)", args)
                if not (op.startswith("j") and m and int(m.group(1), 16) < addr):
                    continue
                t = int(m.group(1), 16)
                ln = samples(t, addr + 1)
                if ln < total * a.min_share / 100:
                    continue
                inner = [x for x in body if t <= x[0] <= addr]
                print(f"    loop {t - lo:#x}-{addr - lo:#x} ({addr - t} bytes, {len(inner)} "
                      f"instructions): {ln} samples, {100 * ln / total:.1f}%")
                loops.append((ln, path, lo, t, addr, inner))
    print(f"  outside the JIT code: {total - in_jit} samples, "
          f"{100 * (total - in_jit) / total:.1f}%")
    for ln, path, base, t, e, body in sorted(loops, key=lambda x: -x[0]):
        print(f"loop {t - base:#x}-{e - base:#x} of map {base:#x}: opcodes (static count, "
              f"samples, share of the loop's)")
        cnt, smp = collections.Counter(), collections.Counter()
        for addr, op, _ in body:
            cnt[op] += 1
            smp[op] += ips.get(addr, 0)
        for op, n in smp.most_common(8):
            print(f"  {op:14s} {cnt[op]:6d} {n:7d} {100 * n / max(ln, 1):5.1f}%")
        r0, r1, n = straight_run(body)
        if n:
            muls = sum(1 for x in body if r0 <= x[0] < r1 and x[1] in ("vmulps", "vfmadd231ps"))
            print(f"  longest straight-line vector run: {r0 - base:#x}-{r1 - base:#x}, {n} "
                  f"instructions, {muls} multiplies; timed alone by")
            print(f"  cc -O2 scripts/jit_chunk_rate.c -o jcr && ./jcr {path} {r0 - base:#x} "
                  f"{r1 - base:#x} {max(muls, 1)} 20000")


if __name__ == "__main__":
    main()
