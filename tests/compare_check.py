#!/usr/bin/env python3
"""compare_check.py: fixtures for `vktrain compare`, and the checks of what it wrote.

Used by tests/test_cli_compare.sh.

  compare_check.py fixtures DIR
      writes result files in the format of docs/COMPARING.md (`vktrain bench suite`, version 1):
      lavapipe.json and swiftshader.json (full suites under --mem-limit 256M, shaped like this
      machine's two CPU drivers: SwiftShader ahead at the smallest batches of fashion_mlp and
      char_gpt, lavapipe ahead from there on; gpt2_small fits no batch under the limit),
      lavapipe-quick.json (a --quick run of the same device with no limit: the same label twice),
      and the refusals: version0.json,
      version2.json, format.json, truncated.json, missing.json (train[3].samples_per_sec
      removed), wrongtype.json (peak.fma_gflops a string), nolabel.json (device.label removed).

  compare_check.py check STDOUT PNG_DIR LAYOUT.json RESULT.json...
      checks, against the result files alone:
        - the tables on stdout: peak FMA and bandwidth, matmul GFLOP/s and fraction of peak per
          size and form, samples/s per model and batch ("no fit", "-"), the largest batch that
          fits ("+" when no batch was refused), the saturation batch, and the crossover lines
          (recomputed here from the rule in docs/COMPARING.md);
        - every picture listed in the layout exists as a PNG of the layout's size, and the set of
          pictures is the one expected (two per model, two for matmul);
        - in each PNG: the axes (dark pixels all along the left and bottom edges of the plot);
          tick positions and labels agree with the axis mapping; one series per device that has
          data, in the device's colour; each point's pixel, mapped back through the axis, gives
          the value in the JSON (within a pixel), and the device's colour is there in the PNG;
          the line between consecutive points is drawn; each device's capacity (memory) or peak
          FMA (matmul GFLOP/s) is a dashed line at the right height, in its colour; legend
          swatches in the right colours.

  compare_check.py html PAGE.html PNG_DIR LAYOUT.json
      the page is self-contained (no external reference), holds every table and embeds each
      picture as a data URI whose bytes are the PNG in PNG_DIR.

  compare_check.py same PNG_DIR_A PNG_DIR_B LAYOUT.json
      two drivers drew the same pictures (at most 0.5% of pixels differ by more than 24).

Exits non-zero with a message on the first failed check.
"""
import base64
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from viewer_check import read_png  # noqa: E402  (one PNG decoder for the tests)


def fail(msg):
    print("compare_check: FAIL: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------
# Fixtures

MODELS = {
    # name: parameters, FLOPs per sample (fwd+bwd), fixed bytes, bytes per sample, T (LM)
    "fashion_mlp": (235146, 1410876, 4 * 235146 * 4 + (3 << 20), 3 * 4 * (784 + 256 + 128 + 10), 0),
    "fashion_cnn": (421642, 72 << 20, 4 * 421642 * 4 + (5 << 20), 820 * 1024, 0),
    "char_gpt": (818688, 3 * 2 * 818688 * 64, 4 * 818688 * 4 + (6 << 20), 3600 * 1024, 64),
    # Fits no batch under 256M: no throughput curve there, only the planner's bytes.
    "gpt2_small": (163037184, 6 * 163037184 * 1024, 3 * 4 * 163037184 + (64 << 20), 300 << 20, 1024),
}


def rate(peak, half, b, wobble):
    """A throughput curve that saturates: peak * b / (b + half), with a fixed wobble."""
    return round(peak * b / (b + half) * wobble, 3)


def suite(label, name, driver, vendor_id, mem, limit, quick, fma, bw, mm, curves, created, seed):
    batches_full = [1 << i for i in range(13)]  # 1 .. 4096
    batches = [1, 16, 128] if quick else batches_full
    cap = limit if limit else mem
    train, saturation = [], []
    k = seed
    for model, (params, flops, fixed, per, T) in MODELS.items():
        peak, half = curves[model]
        ran = []
        for b in batches:
            planned = fixed + per * b
            if planned > cap:
                train.append({"model": model, "parameters": params, "flops_per_sample": flops,
                              "batch": b, "fits": False, "planned_bytes": planned,
                              "reason": "needs %.1f MiB, the device has %.1f MiB"
                                        % (planned / 2**20, cap / 2**20)})
                break
            k = (k * 1103515245 + 12345) % 2**31
            wob = 0.97 + 0.06 * (k / 2**31)
            sps = rate(peak, half, b, wob)
            e = {"model": model, "parameters": params, "flops_per_sample": flops, "batch": b,
                 "fits": True, "planned_bytes": planned, "steps": 20, "samples_per_sec": sps,
                 "step_ms": round(1000 * b / sps, 4),
                 "split": {"matmul": 0.55, "attention": 0.12 if T else 0.0, "other_kernels": 0.1,
                           "communication": 0.0, "host_and_idle": 0.23 if T else 0.35},
                 "peak_memory_bytes": int(planned * 0.93)}
            # SwiftShader's run could not read its memory at two batches: planned bytes drawn.
            if "Swift" in label and b in (2, 64):
                e["peak_memory_bytes"] = None
            if T:
                e["tokens_per_sec"] = round(sps * T, 3)
            train.append(e)
            ran.append((b, sps))
        if not ran:
            continue
        best = max(s for _, s in ran)
        sb, ss = next((b, s) for b, s in ran if s >= 0.9 * best)
        saturation.append({"model": model, "batch": sb, "samples_per_sec": ss,
                           "rule": "smallest batch within 10% of the best samples/s"})
    sizes = [256, 1024] if quick else [256, 512, 1024, 2048]
    matmul = [{"size": s, "form": "NN", "variant": "wide-r32c32-g8", "median_ms": round(2 * s**3 / (mm[s] * 1e6), 4),
               "gflops": mm[s], "fraction_of_peak": round(mm[s] / fma, 4)} for s in sizes]
    cmd = "vktrain bench suite --device %s%s%s --out r.json" % (
        label.split()[0].lower(), " --quick" if quick else "",
        " --mem-limit 256M" if limit else "")
    return {
        "format": "vktrain-bench-suite", "version": 1, "created": created, "command": cmd,
        "quick": quick, "vktrain_version": "0.1.0",
        "host": {"os": "Linux 6.1.0-28-cloud-amd64 x86_64", "cpu": "AMD EPYC 9R14 96-Core Processor",
                 "cores": 2, "memory_bytes": 8323002368, "hostname": "ci-runner"},
        "device": {"label": label, "name": name, "driver": driver, "api_version": "1.3.230",
                   "vendor_id": vendor_id, "device_id": 0, "type": "cpu", "memory_bytes": mem,
                   "mem_limit_bytes": limit},
        "peak": {"fma_gflops": fma, "bandwidth_gbs": bw},
        "matmul": matmul, "train": train, "saturation": saturation,
    }


def fixtures(d):
    os.makedirs(d, exist_ok=True)
    M256 = 256 << 20
    # lavapipe's GFLOP/s from 256 to 1024 lie along SwiftShader's peak FMA line (52.2), as they did
    # in a CI run: the line checks must look past the curve drawn over it.
    lava = suite("llvmpipe", "llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe (Mesa 22.3.6)", 0x10005,
                 8323002368, M256, False, 117.4, 21.6,
                 {256: 51.9, 512: 52.6, 1024: 52.4, 2048: 65.2},
                 {"fashion_mlp": (15000, 24), "fashion_cnn": (158, 4), "char_gpt": (61, 8),
                  "gpt2_small": (0.11, 1)}, "2026-12-01T18:00:00Z", 7)
    swift = suite("SwiftShader", "SwiftShader Device (LLVM 10.0.0)", "SwiftShader driver", 0x1ae0,
                  4294967296, M256, False, 52.2, 9.8,
                  {256: 6.1, 512: 11.3, 1024: 14.2, 2048: 13.1},
                  {"fashion_mlp": (3200, 3), "fashion_cnn": (44, 1), "char_gpt": (14, 1),
                   "gpt2_small": (0.03, 1)}, "2026-12-01T18:40:00Z", 11)
    quick = suite("llvmpipe", "llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe (Mesa 22.3.6)",
                  0x10005, 8323002368, None, True, 112.9, 20.4, {256: 35.9, 1024: 66.4},
                  {"fashion_mlp": (14200, 22), "fashion_cnn": (150, 4), "char_gpt": (58, 8),
                   "gpt2_small": (0.1, 1)},
                  "2026-12-02T09:15:00Z", 3)
    for name, o in (("lavapipe", lava), ("swiftshader", swift), ("lavapipe-quick", quick)):
        json.dump(o, open(os.path.join(d, name + ".json"), "w"), indent=2)
    bad = {}
    for v in (0, 2):
        o = json.loads(json.dumps(swift))
        o["version"] = v
        bad["version%d" % v] = o
    o = json.loads(json.dumps(swift))
    o["format"] = "vktrain-bench-matmul"
    bad["format"] = o
    o = json.loads(json.dumps(swift))
    del o["train"][3]["samples_per_sec"]
    bad["missing"] = o
    o = json.loads(json.dumps(swift))
    o["peak"]["fma_gflops"] = "52.2"
    bad["wrongtype"] = o
    o = json.loads(json.dumps(swift))
    del o["device"]["label"]
    bad["nolabel"] = o
    for name, o in bad.items():
        json.dump(o, open(os.path.join(d, name + ".json"), "w"), indent=2)
    text = json.dumps(swift, indent=2)
    open(os.path.join(d, "truncated.json"), "w").write(text[:len(text) // 2])


# ---------------------------------------------------------------------------------------------
# The results as the checks read them (independently of vktrain)

class Result:
    def __init__(self, path):
        self.path = path
        self.o = json.load(open(path))
        self.label = self.o["device"]["label"]
        self.legend = self.label
        self.train = {}
        for e in self.o["train"]:
            self.train.setdefault(e["model"], {})[e["batch"]] = e
        self.capacity = self.o["device"]["mem_limit_bytes"] or self.o["device"]["memory_bytes"]

    def entry(self, model, b):
        return self.train.get(model, {}).get(b)

    def known_no_fit(self, model, b):
        return any(not e["fits"] and e["batch"] <= b for e in self.train.get(model, {}).values())


def load_results(paths):
    rs = [Result(p) for p in paths]
    for r in rs:
        if sum(q.label == r.label for q in rs) > 1:
            base = os.path.basename(r.path)
            if base.endswith(".json"):
                base = base[:-5]
            r.legend = "%s (%s)" % (r.label, base)
    return rs


def models_of(rs):
    out = []
    for r in rs:
        for e in r.o["train"]:
            if e["model"] not in out:
                out.append(e["model"])
    return out


def fmt_rate(v):
    if v >= 1000:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.3g" % v


# ---------------------------------------------------------------------------------------------
# Tables

def tables(text):
    """Tables of the text output: {title: rows}, each row a list of cells (header first)."""
    out, lines, i = {}, text.split("\n"), 0
    while i < len(lines):
        title = lines[i]
        if (title and not title.startswith(" ") and not title.startswith("==")
                and i + 1 < len(lines) and lines[i + 1].startswith("  ")):
            rows = []
            i += 1
            while i < len(lines) and lines[i].startswith("  "):
                rows.append(re.split(r"\s{2,}", lines[i].strip()))
                i += 1
            out[title] = rows
        else:
            i += 1
    return out


def same_number(cell, value, what):
    try:
        got = float(cell)
    except ValueError:
        fail(f"{what}: table says {cell!r}, the JSON {value}")
    dec = len(cell.split(".")[1]) if "." in cell and "e" not in cell else 0
    tol = 0.5 * 10 ** -dec + 1e-9 * abs(value)
    if "e" not in cell and abs(got - value) > tol:
        fail(f"{what}: table says {cell}, the JSON {value}")
    if "e" in cell and abs(got - value) > 5e-3 * abs(value):
        fail(f"{what}: table says {cell}, the JSON {value}")


def table_by_prefix(tabs, prefix):
    for t, rows in tabs.items():
        if t.startswith(prefix):
            return rows
    fail(f"no table titled {prefix!r} in the output; tables: {list(tabs)}")


def column(rows, legend):
    if legend not in rows[0]:
        fail(f"no column {legend!r} in {rows[0]}")
    return rows[0].index(legend)


def expected_crossovers(model, A, B):
    out = ["%s, %s vs %s" % (model, A.legend, B.legend)]
    batches = sorted(set(A.train.get(model, {})) | set(B.train.get(model, {})))
    states = []
    for b in batches:
        ea, eb = A.entry(model, b), B.entry(model, b)
        fa, fb = bool(ea and ea["fits"]), bool(eb and eb["fits"])
        na = (not ea["fits"]) if ea else A.known_no_fit(model, b)
        nb = (not eb["fits"]) if eb else B.known_no_fit(model, b)
        if fa and fb:
            sa, sb = ea["samples_per_sec"], eb["samples_per_sec"]
            st = "A" if sa > sb else "B" if sa < sb else "E"
            states.append((b, st, sb / sa if st == "B" else sa / sb))
        elif fa and nb:
            states.append((b, "OA", 1))
        elif fb and na:
            states.append((b, "OB", 1))
    groups = []
    for b, st, r in states:
        if groups and groups[-1][0] == st:
            groups[-1][1].append((b, r))
        else:
            groups.append((st, [(b, r)]))
    last, last_end, faster, cross = None, None, 0, 0
    for st, pts in groups:
        bs = [b for b, _ in pts]
        rng = "batch %d" % bs[0] if len(bs) == 1 else "batch %d-%d" % (bs[0], bs[-1])
        if st in ("A", "B"):
            w, o = (A, B) if st == "A" else (B, A)
            if last is not None and last != st:
                b1, b2 = last_end, bs[0]
                r1 = math.log(A.entry(model, b1)["samples_per_sec"] / B.entry(model, b1)["samples_per_sec"])
                r2 = math.log(A.entry(model, b2)["samples_per_sec"] / B.entry(model, b2)["samples_per_sec"])
                t = r1 / (r1 - r2)
                bx = math.exp(math.log(b1) + t * (math.log(b2) - math.log(b1)))
                out.append("  crossover at batch %d: %s overtakes %s between batch %d and %d "
                           "(about %.3g by log-log interpolation)" % (b2, w.legend, o.legend, b1, b2, bx))
                cross += 1
            rs = [r for _, r in pts]
            ratios = "%.2fx" % rs[0] if len(rs) == 1 else "%.2fx-%.2fx" % (min(rs), max(rs))
            out.append("  %s faster at %s (%s)" % (w.legend, rng, ratios))
            last, last_end, faster = st, bs[-1], faster + 1
        elif st == "E":
            out.append("  equal at %s" % rng)
        else:
            out.append("  only %s fits at %s" % ((A if st == "OA" else B).legend, rng))
    if not states:
        out.append("  no batch that both ran or that one ran and the other refused")
    elif faster and not cross:
        out.append("  no crossover: %s is faster at every batch both ran"
                   % (A if last == "A" else B).legend)
    return out, cross


def check_tables(text, rs):
    tabs = tables(text)
    peak = table_by_prefix(tabs, "peak rates")
    for r in rs:
        c = column(peak, r.legend)
        rows = {row[0]: row for row in peak[1:]}
        same_number(rows["FMA GFLOP/s"][c], r.o["peak"]["fma_gflops"], f"{r.legend} peak FMA")
        same_number(rows["bandwidth GB/s"][c], r.o["peak"]["bandwidth_gbs"], f"{r.legend} bandwidth")
    for title, key in (("matmul GFLOP/s", "gflops"), ("matmul fraction of peak FMA", "fraction_of_peak")):
        t = table_by_prefix(tabs, title)
        rows = {(int(row[0]), row[1]): row for row in t[1:]}
        want = {(m["size"], m.get("form", "NN")) for r in rs for m in r.o["matmul"]}
        if set(rows) != want:
            fail(f"{title}: rows {sorted(rows)}, the results have {sorted(want)}")
        for r in rs:
            c = column(t, r.legend)
            mine = {(m["size"], m.get("form", "NN")): m for m in r.o["matmul"]}
            for k, row in rows.items():
                if k in mine:
                    same_number(row[c], mine[k][key], f"{title} {r.legend} size {k[0]}")
                elif row[c] != "-":
                    fail(f"{title} {r.legend} size {k[0]}: {row[c]!r} for a size it did not run")
    for model in models_of(rs):
        t = table_by_prefix(tabs, model + ": samples/s")
        rows = {row[0]: row for row in t[1:]}
        batches = sorted({b for r in rs for b in r.train.get(model, {})})
        got = [int(k) for k in rows if k.isdigit()]
        if got != batches:
            fail(f"{model}: table rows {got}, batches in the results {batches}")
        for r in rs:
            c = column(t, r.legend)
            for b in batches:
                e, cell = r.entry(model, b), rows[str(b)][c]
                if e is None:
                    ok = cell == "-"
                elif not e["fits"]:
                    ok = cell == "no fit"
                else:
                    same_number(cell, e["samples_per_sec"], f"{model} {r.legend} batch {b}")
                    ok = True
                if not ok:
                    fail(f"{model} {r.legend} batch {b}: table says {cell!r}, the JSON {e}")
            ents = list(r.train.get(model, {}).values())
            fits = [e["batch"] for e in ents if e["fits"]]
            want = "-" if not fits else "%d%s" % (max(fits), "" if any(not e["fits"] for e in ents) else "+")
            if rows["largest batch that fits"][c] != want:
                fail(f"{model} {r.legend}: largest batch that fits {rows['largest batch that fits'][c]}, want {want}")
            sat = [s for s in r.o["saturation"] if s["model"] == model]
            want = str(sat[0]["batch"]) if sat else "-"
            if rows["saturation batch"][c] != want:
                fail(f"{model} {r.legend}: saturation batch {rows['saturation batch'][c]}, want {want}")
    # Crossovers: the block of lines for each pair, as the rule gives them.
    lines = text.split("\n")
    crossings = 0
    for model in models_of(rs):
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                if model not in rs[i].train or model not in rs[j].train:
                    continue
                want, n = expected_crossovers(model, rs[i], rs[j])
                crossings += n
                if want[0] not in lines:
                    fail(f"no crossover block {want[0]!r}")
                k = lines.index(want[0])
                got = lines[k:k + len(want)]
                if got != want:
                    fail("crossover lines differ:\n  got:  " + "\n        ".join(got)
                         + "\n  want: " + "\n        ".join(want))
    return crossings


# ---------------------------------------------------------------------------------------------
# Pictures

def near(img, x, y, color, radius, tol=10):
    w, h, rows = img
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            if dx * dx + dy * dy > radius * radius:
                continue
            px, py = int(round(x)) + dx, int(round(y)) + dy
            if 0 <= px < w and 0 <= py < h:
                p = rows[py][3 * px:3 * px + 3]
                if all(abs(p[c] - color[c]) <= tol for c in range(3)):
                    return True
    return False


def pix(img, x, y):
    w, h, rows = img
    return rows[y][3 * x:3 * x + 3]


def dark(p, axis, tol=40):
    return all(abs(p[c] - axis[c]) <= tol for c in range(3))


def axis_map(a, v):
    f = math.log if a["scale"] == "log" else (lambda t: t)
    t = (f(v) - f(a["min"])) / (f(a["max"]) - f(a["min"]))
    return a["p0"] + t * (a["p1"] - a["p0"])


def axis_unmap(a, p):
    t = (p - a["p0"]) / (a["p1"] - a["p0"])
    if a["scale"] == "log":
        return math.exp(math.log(a["min"]) + t * (math.log(a["max"]) - math.log(a["min"])))
    return a["min"] + t * (a["max"] - a["min"])


UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
         "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "%": 0.01}


def label_value(s):
    m = re.fullmatch(r"(-?[0-9.]+(?:e[+-]?[0-9]+)?) ?([A-Za-z%]*)", s)
    if not m or m.group(2) not in UNITS:
        fail(f"tick label {s!r} does not read as a number")
    return float(m.group(1)) * UNITS[m.group(2)]


def seg_dist(px, py, a, b):
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    L = dx * dx + dy * dy
    t = 0 if L == 0 else max(0, min(1, ((px - ax) * dx + (py - ay) * dy) / L))
    return math.hypot(px - (ax + t * dx), py - (ay + t * dy))


def expected_series(kind, model, r):
    """The points a picture must show for result r, from the JSON: [(x, y, hollow)]."""
    if kind == "throughput":
        return [(b, e["samples_per_sec"], False) for b, e in sorted(r.train.get(model, {}).items()) if e["fits"]]
    if kind == "memory":
        out = []
        for b, e in sorted(r.train.get(model, {}).items()):
            m = e.get("peak_memory_bytes") if e["fits"] else None
            out.append((b, m if m else e["planned_bytes"], not m))
        return out
    key = "gflops" if kind == "matmul_gflops" else "fraction_of_peak"
    return [(m["size"], m[key], False) for m in sorted(r.o["matmul"], key=lambda m: m["size"])]


def check_picture(pic, img, rs, lay):
    name = pic["file"]
    w, h, rows = img
    if (w, h) != (pic["width"], pic["height"]):
        fail(f"{name}: {w}x{h}, the layout says {pic['width']}x{pic['height']}")
    if pic["empty"]:  # nothing to draw: no axes, no series; only when the results have nothing
        if any(expected_series(pic["kind"], pic.get("model"), r) for r in rs):
            fail(f"{name}: drawn empty, but the results have points for it")
        return
    axis = lay["axis"]
    P = pic["plot"]
    x0, y0, x1, y1 = int(P["x0"]), int(P["y0"]), int(P["x1"]), int(P["y1"])
    # Axes: the left edge (columns x0-1, x0) and the bottom edge (rows y1-1, y1), dark all along.
    left = sum(dark(pix(img, x, y), axis) for y in range(y0 + 1, y1) for x in (x0 - 1, x0))
    bottom = sum(dark(pix(img, x, y), axis) for x in range(x0 + 1, x1) for y in (y1 - 1, y1))
    if left < 0.98 * 2 * (y1 - y0 - 1) or bottom < 0.98 * 2 * (x1 - x0 - 1):
        fail(f"{name}: axis lines not drawn (dark pixels: left {left}/{2 * (y1 - y0 - 1)}, "
             f"bottom {bottom}/{2 * (x1 - x0 - 1)})")
    # Nothing dark just inside the plot away from the axes (the axes are lines, not the fill).
    for ax_name in ("x", "y"):
        a = pic[ax_name]
        labelled = [t for t in a["ticks"] if "label" in t]
        if len(labelled) < 2:
            fail(f"{name}: {ax_name} axis has {len(labelled)} labelled ticks")
        for t in a["ticks"]:
            if abs(axis_map(a, t["value"]) - t["px"]) > 0.5:
                fail(f"{name}: {ax_name} tick {t} is not where the axis puts {t['value']}")
            if "label" in t and abs(label_value(t["label"]) - t["value"]) > 5e-3 * abs(t["value"]) + 1e-12:
                fail(f"{name}: {ax_name} tick label {t['label']!r} for the value {t['value']}")
        lo, hi = sorted((a["p0"], a["p1"]))
        if a["scale"] == "log" and not (a["min"] > 0):
            fail(f"{name}: log axis from {a['min']}")
    kind, model = pic["kind"], pic.get("model")
    devs = {d["key"]: d for d in lay["devices"]}
    want_keys = [k for k, r in enumerate(rs) if expected_series(kind, model, r)]
    got_keys = [s["key"] for s in pic["series"]]
    if got_keys != want_keys:
        fail(f"{name}: series for devices {got_keys}, want one per device with data {want_keys}")
    all_pts = [(s["key"], p["px"], p["py"]) for s in pic["series"] for p in s["points"]]
    segs = [(s["key"], (a["px"], a["py"]), (b["px"], b["py"]))
            for s in pic["series"] for a, b in zip(s["points"], s["points"][1:])]
    for s in pic["series"]:
        r = rs[s["key"]]
        if s["color"] != devs[s["key"]]["color"] or s["label"] != r.legend:
            fail(f"{name}: series {s['label']} {s['color']}, device {r.legend} {devs[s['key']]['color']}")
        want = expected_series(kind, model, r)
        got = [(p["x"], p["y"], p["hollow"]) for p in s["points"]]
        if len(got) != len(want) or any(g[0] != e[0] or abs(g[1] - e[1]) > 1e-9 * abs(e[1]) or g[2] != e[2]
                                        for g, e in zip(got, want)):
            fail(f"{name}: {r.legend}: points {got}, the JSON gives {want}")
        for p in s["points"]:
            # The pixel, mapped back through the axes, is the value, within a pixel.
            for a, v, q in ((pic["x"], p["x"], p["px"]), (pic["y"], p["y"], p["py"])):
                if abs(axis_map(a, v) - q) > 1:
                    fail(f"{name}: {r.legend}: {v} drawn at {q}, the axis puts it at {axis_map(a, v)}")
                back = axis_unmap(a, q)
                one = abs(axis_unmap(a, q + 1) - back)
                if abs(back - v) > one:
                    fail(f"{name}: {r.legend}: pixel {q} reads {back}, the JSON says {v}")
            if not (x0 <= p["px"] <= x1 and y0 <= p["py"] <= y1):
                fail(f"{name}: {r.legend}: point ({p['x']}, {p['y']}) outside the plot")
            hidden = any(k != s["key"] and math.hypot(px - p["px"], py - p["py"]) < 11 for k, px, py in all_pts)
            if not near(img, p["px"], p["py"], s["color"], 5) and not hidden:
                fail(f"{name}: {r.legend}: no {s['color']} pixel at the point ({p['x']}, {p['y']}) "
                     f"drawn at ({p['px']:.1f}, {p['py']:.1f})")
        # The line: the colour at the middle of each segment, unless another series passes there.
        for a, b in zip(s["points"], s["points"][1:]):
            mx, my = (a["px"] + b["px"]) / 2, (a["py"] + b["py"]) / 2
            if math.hypot(b["px"] - a["px"], b["py"] - a["py"]) < 14:
                continue
            crossed = any(k != s["key"] and seg_dist(mx, my, p0, p1) < 5 for k, p0, p1 in segs) or \
                any(k != s["key"] and math.hypot(px - mx, py - my) < 9 for k, px, py in all_pts)
            dashed = a["hollow"] or b["hollow"]
            if not crossed and not near(img, mx, my, s["color"], 6 if dashed else 3):
                fail(f"{name}: {r.legend}: the line from ({a['x']}, {a['y']}) to ({b['x']}, {b['y']}) "
                     f"is missing at ({mx:.0f}, {my:.0f})")
    # Reference lines: each device's capacity (memory) or peak FMA (matmul GFLOP/s).
    if kind in ("memory", "matmul_gflops"):
        want = {k: (r.capacity if kind == "memory" else r.o["peak"]["fma_gflops"])
                for k, r in enumerate(rs) if kind == "matmul_gflops" or expected_series(kind, model, r)}
        got = {l["key"]: l for l in pic["hlines"]}
        if set(got) != set(want):
            fail(f"{name}: lines for devices {sorted(got)}, want {sorted(want)}")
        for k, l in got.items():
            if abs(l["value"] - want[k]) > 1e-9 * want[k]:
                fail(f"{name}: {rs[k].legend}: line at {l['value']}, the JSON says {want[k]}")
            if abs(axis_map(pic["y"], want[k]) - l["py"]) > 1:
                fail(f"{name}: {rs[k].legend}: line at y {l['py']}, the axis puts {want[k]} at "
                     f"{axis_map(pic['y'], want[k])}")
            share = sum(abs(o["py"] - l["py"]) < 2.5 for o in got.values())
            y = int(round(l["py"]))
            # Curves and markers are drawn over the lines: a device's curve can run along another's
            # peak (lavapipe's GFLOP/s at SwiftShader's peak FMA), so only the open stretches count.
            xs = [x for x in range(int(l["x0"]) + 2, int(l["x1"]) - 2)
                  if not any(seg_dist(x, l["py"], p0, p1) < 4 for _, p0, p1 in segs)
                  and not any(math.hypot(px - x, py - l["py"]) < 9 for _, px, py in all_pts)]
            on = sum(any(near(img, x, yy, l["color"], 0) for yy in (y - 1, y)) for x in xs)
            if on < 0.6 * len(xs) / (share + 0.7):
                fail(f"{name}: {rs[k].legend}: the line at y {y} shows its colour on {on} of the {len(xs)} "
                     f"pixels no curve covers ({share} lines share the row)")
    # Legend swatches.
    for e in pic["legend"]:
        cx, cy = (e["x0"] + e["x1"]) / 2, (e["y0"] + e["y1"]) / 2
        if not near(img, cx - 8, cy, e["color"], 2) and not near(img, cx + 8, cy, e["color"], 2):
            fail(f"{name}: legend entry {e['text']!r} has no swatch in {e['color']}")


def check(stdout_path, png_dir, layout_path, paths):
    rs = load_results(paths)
    text = open(stdout_path).read()
    crossings = check_tables(text, rs)
    lay = json.load(open(layout_path))
    if [d["legend"] for d in lay["devices"]] != [r.legend for r in rs]:
        fail(f"layout devices {[d['legend'] for d in lay['devices']]}, want {[r.legend for r in rs]}")
    colors = [tuple(d["color"]) for d in lay["devices"]]
    if len(set(colors)) != len(colors):
        fail(f"two devices share a colour: {colors}")
    want = {"matmul-gflops.png", "matmul-fraction.png"}
    for m in models_of(rs):
        want |= {m + "-throughput.png", m + "-memory.png"}
    got = {p["file"] for p in lay["pictures"]}
    if got != want:
        fail(f"pictures {sorted(got)}, want {sorted(want)}")
    on_disk = {f for f in os.listdir(png_dir) if f.endswith(".png")}
    if on_disk != want:
        fail(f"{png_dir} holds {sorted(on_disk)}, want {sorted(want)}")
    npts = 0
    for pic in lay["pictures"]:
        img = read_png(os.path.join(png_dir, pic["file"]))
        check_picture(pic, img, rs, lay)
        npts += sum(len(s["points"]) for s in pic["series"])
    print(f"compare_check: ok: {len(lay['pictures'])} pictures, {npts} points, "
          f"{crossings} crossovers, tables match {len(rs)} results")


def check_html(page, png_dir, layout_path):
    text = open(page).read()
    lay = json.load(open(layout_path))
    if re.search(r"""(src|href)=["'](?!data:)""", text) or "http://" in text or "https://" in text:
        fail(f"{page} refers to something outside itself")
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    if len(uris) != len(lay["pictures"]):
        fail(f"{page} embeds {len(uris)} pictures, want {len(lay['pictures'])}")
    files = {open(os.path.join(png_dir, p["file"]), "rb").read() for p in lay["pictures"]}
    for u in uris:
        if base64.b64decode(u) not in files:
            fail(f"{page}: an embedded picture is none of the PNGs in {png_dir}")
    for t in ("peak rates", "matmul GFLOP/s", "where one device overtakes another", "samples/s by batch"):
        if t not in text:
            fail(f"{page}: no {t!r}")
    if text.count("<table>") < 4 or not text.rstrip().endswith("</html>"):
        fail(f"{page}: tables missing or the page is cut short")
    print(f"compare_check: ok: {page} is self-contained with {len(uris)} pictures")


def check_same(dir_a, dir_b, layout_path):
    lay = json.load(open(layout_path))
    for p in lay["pictures"]:
        a, b = read_png(os.path.join(dir_a, p["file"])), read_png(os.path.join(dir_b, p["file"]))
        if a[:2] != b[:2]:
            fail(f"{p['file']}: {a[:2]} against {b[:2]}")
        diff = 0
        for ra, rb in zip(a[2], b[2]):
            if ra != rb:
                diff += sum(1 for i in range(0, len(ra), 3)
                            if max(abs(ra[i] - rb[i]), abs(ra[i + 1] - rb[i + 1]),
                                   abs(ra[i + 2] - rb[i + 2])) > 24)
        if diff > 0.005 * a[0] * a[1]:
            fail(f"{p['file']}: {diff} pixels differ between the two drivers")
    print(f"compare_check: ok: both drivers drew the same {len(lay['pictures'])} pictures")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["fixtures"] and len(a) == 2:
        fixtures(a[1])
    elif a[:1] == ["check"] and len(a) >= 5:
        check(a[1], a[2], a[3], a[4:])
    elif a[:1] == ["html"] and len(a) == 4:
        check_html(a[1], a[2], a[3])
    elif a[:1] == ["same"] and len(a) == 4:
        check_same(a[1], a[2], a[3])
    else:
        sys.exit(__doc__)
