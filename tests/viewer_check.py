#!/usr/bin/env python3
"""viewer_check.py: checks a picture drawn by `vktrain view` against the trace it shows.

Used by tests/test_viewer.sh. Reads PNG (decoded here with zlib) or XWD screenshots (xwd -root),
the trace JSON and the layout JSON that `vktrain view --layout` writes (where the timeline's
rows are and which window of time it shows). Checks:
  - the size;
  - every device row shows the category colour of each event at the event's place (events at
    least 6 pixels wide), and no category colour where the device had no event (gaps of at
    least 8 pixels) - so pipeline bubbles are visible as bubbles;
  - the category colours are distinct from each other and from the background;
  - text is drawn (pixels of the text colour in the title bar and the timeline header);
  - with --compare OTHER: the two pictures agree (a window screenshot against the PNG).
Exits non-zero with a message on the first failed check.

usage: viewer_check.py IMAGE TRACE.json LAYOUT.json [--size WxH] [--offset X,Y] [--compare PNG]
"""
import json
import struct
import sys
import zlib


def fail(msg):
    print("viewer_check: FAIL: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------
# Images as (width, height, rows of bytes RGB)

def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                fail(f"{path}: unexpected PNG format depth {depth} colour type {ctype}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if f == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 255
        elif f == 4:  # Paeth; the first pixel has no left neighbours (a = c = 0: predictor b)
            for x in range(bpp):
                line[x] = (line[x] + prev[x]) & 255
            for x in range(bpp, stride):
                a, b, c = line[x - bpp], prev[x], prev[x - bpp]
                pa, pb, pc = b - c, a - c, a + b - c - c
                if pa < 0: pa = -pa
                if pb < 0: pb = -pb
                if pc < 0: pc = -pc
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif f != 0:
            fail(f"{path}: bad PNG filter {f}")
        rows.append(bytes(line) if bpp == 3 else bytes(b for k, b in enumerate(line) if k % 4 != 3))
        prev = line
    return w, h, rows


def read_xwd(path):
    data = open(path, "rb").read()
    hdr = struct.unpack(">25I", data[:100])
    (header_size, version, fmt, depth, w, h, _xoff, byte_order, _unit, _bit_order, _pad, bpp,
     bytes_per_line, _vclass, rmask, gmask, bmask, _bits_rgb, _cmap_entries, ncolors) = hdr[:20]
    if version != 7 or fmt != 2 or bpp not in (24, 32):
        fail(f"{path}: unsupported XWD (version {version}, format {fmt}, {bpp} bits a pixel)")
    pos = header_size + ncolors * 12
    step = bpp // 8

    def shift(mask):
        s = 0
        while mask and not mask & 1:
            mask >>= 1
            s += 1
        return s

    rs, gs, bs = shift(rmask), shift(gmask), shift(bmask)
    order = "little" if byte_order == 0 else "big"
    rows = []
    fast = step == 4 and byte_order == 0 and (rmask, gmask, bmask) == (0xff0000, 0xff00, 0xff)
    for y in range(h):
        line = data[pos + y * bytes_per_line:pos + y * bytes_per_line + w * step]
        out = bytearray(w * 3)
        if fast:  # B, G, R, X bytes
            out[0::3], out[1::3], out[2::3] = line[2::4], line[1::4], line[0::4]
            rows.append(bytes(out))
            continue
        for x in range(w):
            v = int.from_bytes(line[x * step:x * step + step], order)
            out[3 * x] = (v & rmask) >> rs
            out[3 * x + 1] = (v & gmask) >> gs
            out[3 * x + 2] = (v & bmask) >> bs
        rows.append(bytes(out))
    return w, h, rows


def pixel(img, x, y, off=(0, 0)):
    w, h, rows = img
    x, y = int(x) + off[0], int(y) + off[1]
    if not (0 <= x < w and 0 <= y < h):
        fail(f"pixel ({x},{y}) is outside the {w}x{h} image")
    r = rows[y]
    return (r[3 * x], r[3 * x + 1], r[3 * x + 2])


def close(a, b, tol=3):
    return all(abs(p - q) <= tol for p, q in zip(a, b))


# ---------------------------------------------------------------------------------------------

def main():
    args = sys.argv[1:]
    if len(args) < 3:
        fail(__doc__)
    image, trace_path, layout_path = args[:3]
    opts = dict(zip(args[3::2], args[4::2]))
    img = read_xwd(image) if image.endswith(".xwd") else read_png(image)
    trace = json.load(open(trace_path))
    lay = json.load(open(layout_path))
    off = tuple(int(v) for v in opts.get("--offset", "0,0").split(","))
    want_w, want_h = lay["width"], lay["height"]
    if "--size" in opts:
        want_w, want_h = (int(v) for v in opts["--size"].lower().split("x"))
    if "--offset" not in opts and (img[0], img[1]) != (want_w, want_h):
        fail(f"{image} is {img[0]}x{img[1]}, want {want_w}x{want_h}")
    if img[0] < off[0] + want_w or img[1] < off[1] + want_h:
        fail(f"{image} ({img[0]}x{img[1]}) cannot hold a {want_w}x{want_h} picture at {off}")

    cats = {k: tuple(v) for k, v in lay["categories"].items()}
    bg, text = tuple(lay["background"]), tuple(lay["text"])
    names = list(cats)

    def dist(a, b):
        return sum((p - q) ** 2 for p, q in zip(a, b)) ** 0.5

    for i, a in enumerate(names):
        if dist(cats[a], bg) < 80:
            fail(f"category {a} colour {cats[a]} is too close to the background {bg}")
        for b in names[i + 1:]:
            if dist(cats[a], cats[b]) < 60:
                fail(f"categories {a} and {b} have indistinct colours {cats[a]} {cats[b]}")

    tl = lay.get("timeline")
    if not tl:
        fail("the layout has no timeline")
    x0, x1, t0, t1 = tl["x0"], tl["x1"], tl["t0_us"], tl["t1_us"]
    rows = {r["pid"]: r for r in tl["rows"]}

    def to_x(ts):
        return x0 + (ts - t0) / (t1 - t0) * (x1 - x0)

    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    pids = sorted({e["pid"] for e in events})
    if sorted(rows) != pids:
        fail(f"timeline rows {sorted(rows)} but the trace has devices {pids}")
    checked = gaps = 0
    for pid in pids:
        row = rows[pid]
        y = row["y0"] + 6  # inside the event boxes, above the text they may carry
        evs = sorted((e for e in events if e["pid"] == pid), key=lambda e: e["ts"])
        seen = set()
        for e in evs:
            a, b = to_x(e["ts"]), to_x(e["ts"] + e["dur"])
            if b - a < 6 or a < x0 or b > x1:
                continue
            got = pixel(img, (a + b) / 2, y, off)
            want = cats[e["cat"]]
            if not close(got, want):
                fail(f"device {pid}: event {e['name']} ({e['cat']}) at x {a:.0f}..{b:.0f}, y {y:.0f} "
                     f"shows {got}, want {want}")
            seen.add(e["cat"])
            checked += 1
        # Where the device had no event (a bubble), no category colour.
        end = None
        for e in evs:
            if end is not None:
                a, b = max(to_x(end), x0), min(to_x(e["ts"]), x1)
                if b - a >= 8:
                    for fx in (0.3, 0.5, 0.7):
                        got = pixel(img, a + fx * (b - a), y, off)
                        hit = [c for c, v in cats.items() if close(got, v, 12)]
                        if hit:
                            fail(f"device {pid}: the gap at x {a:.0f}..{b:.0f} shows {got}, the colour of {hit}")
                    gaps += 1
            end = max(end or 0, e["ts"] + e["dur"])
        # Every category with an event wide enough to see must have been seen in its colour (a
        # real trace's optimizer step may be narrower than a pixel: not checkable, not required).
        wide = {e["cat"] for e in evs
                if to_x(e["ts"] + e["dur"]) - to_x(e["ts"]) >= 6 and to_x(e["ts"]) >= x0
                and to_x(e["ts"] + e["dur"]) <= x1}
        if seen != wide or not seen:
            fail(f"device {pid}: categories {sorted(wide)} wide enough in the trace, {sorted(seen)} checked on screen")

    # Text: pixels of the text colour in the title bar and in the timeline's header line.
    def count_text(ya, yb, xa=0, xb=None):
        xb = want_w if xb is None else xb
        n = 0
        for yy in range(int(ya), int(yb)):
            for xx in range(int(xa), int(xb), 1):
                if close(pixel(img, xx, yy, off), text, 24):
                    n += 1
        return n

    title = count_text(4, 40, 0, 400)
    header = count_text(tl["y0"] - 50, tl["y0"] - 22, 0, 300)
    labels = count_text(tl["y0"], tl["y1"], 20, x0 - 4)
    if title < 150 or header < 40 or labels < 40:
        fail(f"too little text: {title} title pixels, {header} in the timeline header, {labels} in device labels")

    if "--compare" in opts:
        other = read_png(opts["--compare"])
        # The footer differs (the window lists its keys): compare everything above it.
        same = total = 0
        for yy in range(0, want_h - 30, 3):
            for xx in range(0, want_w, 3):
                total += 1
                same += close(pixel(img, xx, yy, off), pixel(other, xx, yy), 8)
        if same < 0.97 * total:
            fail(f"the picture differs from {opts['--compare']}: {same} of {total} sampled pixels agree")
        print(f"viewer_check: {same / total:.1%} of sampled pixels agree with {opts['--compare']}")

    print(f"viewer_check: ok: {image}: {checked} events and {gaps} gaps in place, text present "
          f"({title}/{header}/{labels} pixels)")


if __name__ == "__main__":
    main()
