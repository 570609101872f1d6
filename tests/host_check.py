#!/usr/bin/env python3
"""host_check.py FILE: the "host" object of FILE (one JSON document, or the last JSON line of a
command's output: (a `bench matmul`,
`bench train` or `bench suite` result, engine/cli/host.c) against this machine, read here
independently: /proc/cpuinfo's model name, vendor, family, model and stepping, the widest vector
ISA and FMA its flags name, the online CPUs, the L2 a core and the L3 (sysfs, else getconf), MemTotal
and uname. Exits non-zero with the first difference."""
import json
import os
import re
import subprocess
import sys


def cpuinfo():
    out = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break  # the first processor's block
            k, _, v = line.partition(":")
            out.setdefault(k.strip(), v.strip())
    return out


def sysfs_line(path):
    """The first line of a sysfs file, stripped, or "" where it is absent."""
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return ""


def cache_bytes(level):
    """The L2 or L3 as the engine reads it: cpu0's data or unified cache of that level in sysfs,
    else glibc's sysconf (getconf: Python's os.sysconf does not name it), else 0."""
    for i in range(16):
        d = f"/sys/devices/system/cpu/cpu0/cache/index{i}"
        lv = sysfs_line(f"{d}/level")
        if not lv:
            break
        if lv != str(level) or sysfs_line(f"{d}/type") == "Instruction":
            continue
        m = re.match(r"(\d+)([KkM]?)", sysfs_line(f"{d}/size"))
        n = int(m.group(1)) << {"": 0, "K": 10, "k": 10, "M": 20}[m.group(2)] if m else 0
        if n:
            return n
    n = int(subprocess.run(["getconf", f"LEVEL{level}_CACHE_SIZE"], capture_output=True,
                           text=True, check=True).stdout.strip() or 0)
    return max(n, 0)


def main():
    text = open(sys.argv[1]).read()
    try:
        o = json.loads(text)  # a result file (bench suite --out)
    except json.JSONDecodeError:  # a command's output: text lines, then the JSON line
        o = json.loads([l for l in text.splitlines() if l.strip().startswith("{")][-1])
    h = o["host"]
    ci = cpuinfo()
    u = os.uname()
    assert h["os"] == f"{u.sysname} {u.release} {u.machine}", h["os"]
    assert h["cpu"] == ci.get("model name", "unknown"), (h["cpu"], ci.get("model name"))
    assert h["cpu_vendor"] == ci.get("vendor_id", ""), h
    for key, field in (("cpu_family", "cpu family"), ("cpu_model", "model"),
                       ("cpu_stepping", "stepping")):
        if field in ci and ci[field].isdigit():
            assert h[key] == int(ci[field]), (key, h[key], ci[field])
        else:
            assert key not in h, (key, h)
    flags = set(ci.get("flags", "").split())
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
           else "AVX" if "avx" in flags else "SSE" if flags else "")
    assert h["isa"] == isa, (h["isa"], isa)
    assert h["fma"] == ("fma" in flags), h
    # AMD's Zen generations (families 17h, 19h, 1Ah) are named; anything else is not.
    zen = h["cpu_vendor"] == "AuthenticAMD" and h.get("cpu_family") in (0x17, 0x19, 0x1A)
    assert h["cpu_uarch"].startswith("Zen") if zen else h["cpu_uarch"] == "", h
    if h.get("cpu_family") == 0x19 and h.get("cpu_model") in (0x01, 0x21):  # Milan, Vermeer
        assert h["cpu_uarch"] == "Zen 3", h
    if h.get("cpu_family") == 0x17 and h.get("cpu_model") in (0x31, 0x71):  # Rome, Matisse
        assert h["cpu_uarch"] == "Zen 2", h
    if h.get("cpu_family") == 0x19 and h.get("cpu_model") in (0x11, 0x61):  # Genoa, Raphael
        assert h["cpu_uarch"] == "Zen 4", h
    assert h["cores"] == os.sysconf("SC_NPROCESSORS_ONLN"), h
    for level in (2, 3):
        key, size = f"l{level}_bytes", cache_bytes(level)
        assert h.get(key, 0) == size, (key, h.get(key), size)
    with open("/proc/meminfo") as f:
        mem = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
    assert h["memory_bytes"] == mem, (h["memory_bytes"], mem)
    assert h["hostname"] == u.nodename[:127], (h["hostname"], u.nodename)


if __name__ == "__main__":
    main()
