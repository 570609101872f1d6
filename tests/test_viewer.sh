#!/usr/bin/env bash
# test_viewer.sh: `vktrain view`. Args: VKTRAIN_BINARY SOURCE_DIR
# A synthetic two-device trace (tests/test_trace --synthetic) is rendered headless to PNG on
# lavapipe and on SwiftShader (with the validation layer on: any message fails the command), and
# each picture is checked against the trace (tests/viewer_check.py: every event's category colour
# in its device's row, no colour in the bubbles, text present). Then, under Xvfb, the window:
# it shows the same picture (screenshot with xwd) and closes by itself (--exit-after); a live
# replay grows and pauses; keys (panel, zoom, pan) and a resize change the picture.
# Errors: bad files, no display, a validation message.
set -uo pipefail
bin=$1
src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
in_ci=0
[ "${CI:-}" = true ] && in_ci=1
out=$(mktemp -d)
xvfb_pid=""
cleanup() {
    [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null && wait "$xvfb_pid" 2>/dev/null
    rm -rf "$out"
}
trap cleanup EXIT
checker="$src/tests/viewer_check.py"
gen="$(dirname "$bin")/tests/test_trace"
trace="$out/trace.json"

"$gen" --synthetic "$trace"; check "synthetic trace written" $?

# Which drivers are here: both in CI, whatever there is elsewhere.
devices=()
"$bin" devices > "$out/devices.txt" 2>&1
for d in llvmpipe swiftshader; do
    if grep -qi "$d" "$out/devices.txt"; then devices+=("$d")
    elif [ $in_ci -eq 1 ]; then echo "FAIL CI=true but there is no $d device"; fails=$((fails + 1))
    else echo "note: no $d device; not tested"; fi
done

# ---------------------------------------------------------------------------------------------
# Headless PNGs on each driver, validation on (ctest sets VKT_VALIDATION=1).
for d in "${devices[@]}"; do
    VKT_VALIDATION=1 "$bin" view "$trace" --png "$out/$d.png" --device "$d" --layout "$out/$d.layout.json" \
        > "$out/$d.out" 2> "$out/$d.err"
    rc=$?
    cat "$out/$d.err"
    [ $rc -eq 0 ] && ! grep -qi validation "$out/$d.err"; check "$d: renders the PNG, no validation message" $?
    python3 "$checker" "$out/$d.png" "$trace" "$out/$d.layout.json" --size 1280x720
    check "$d: picture matches the trace" $?
done
if [ ${#devices[@]} -eq 2 ]; then
    python3 "$checker" "$out/llvmpipe.png" "$trace" "$out/llvmpipe.layout.json" --compare "$out/swiftshader.png"
    check "lavapipe and SwiftShader draw the same picture" $?
fi
d=${devices[0]:-llvmpipe}

# Other sizes and panels.
"$bin" view "$trace" --png "$out/small.png" --size 800x480 --device "$d" --layout "$out/small.layout.json" > /dev/null
check "--size 800x480 renders" $?
python3 "$checker" "$out/small.png" "$trace" "$out/small.layout.json" --size 800x480; check "800x480 matches the trace" $?
"$bin" view "$trace" --png "$out/tl.png" --panel timeline --device "$d" --layout "$out/tl.layout.json" > /dev/null
python3 "$checker" "$out/tl.png" "$trace" "$out/tl.layout.json"; check "timeline panel matches the trace" $?
for p in devices training; do
    "$bin" view "$trace" --png "$out/$p.png" --panel $p --device "$d" > /dev/null && \
        python3 -c "import struct,sys; d=open(sys.argv[1],'rb').read(24); sys.exit(0 if struct.unpack('>II', d[16:24]) == (1280, 720) else 1)" "$out/$p.png"
    check "panel $p renders" $?
done

# Device names (docs/PARALLELISM.md, "Naming devices"), as the viewer drew them (--layout's
# "names"): row labels and the utilisation and memory legends carry the row's position, #0 and
# #1. A trace whose names do not start with it (an older vktrain's "#N name", N the device's
# index, or another tool's "GPU") is shown as "#0 name (device N)" and "#1 GPU".
python3 - "$trace" "$out/renamed.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
new = {0: "#1 llvmpipe (old numbering)", 1: "GPU"}
for e in t["traceEvents"]:
    if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] in new:
        e["args"]["name"] = new[e["pid"]]
for dev in t["otherData"]["devices"]:
    dev["name"] = new[dev["pid"]]
json.dump(t, open(sys.argv[2], "w"))
PY
for f in trace renamed; do
    "$bin" view "$out/$f.json" --png "$out/$f.names.png" --device "$d" --layout "$out/$f.names.json" > /dev/null
    check "names: $f renders" $?
done
python3 - "$out/trace.names.json" "$out/renamed.names.json" <<'PY'; check "names: rows and legends numbered by position; foreign names renumbered" $?
import json, sys
def names(path, where):
    return [(n["pid"], n["text"]) for n in json.load(open(path))["names"] if n["where"] == where]
for path in sys.argv[1:3]:
    for where in ("timeline", "utilisation", "memory"):
        got = names(path, where)
        print(path.rsplit("/", 1)[-1], where, got)
        assert [p for p, _ in got] == [0, 1], (where, got)
        assert all(text.startswith("#%d " % p) for p, text in got), (where, got)
syn = [t for _, t in names(sys.argv[1], "timeline")]
assert syn[0].startswith("#0 llvmpipe") and syn[1].startswith("#1 SwiftShader"), syn
old = [t for _, t in names(sys.argv[2], "timeline")]
assert old[0].startswith("#0 llvmpipe") and old[0].endswith("(device 1)") and old[1] == "#1 GPU", old
PY

# ---------------------------------------------------------------------------------------------
# Errors: one clear line, non-zero.
expect_error() { # NAME PATTERN command...
    local name=$1 pattern=$2
    shift 2
    "$@" > /dev/null 2> "$out/err"
    local rc=$?
    [ $rc -ne 0 ] && grep -q -- "$pattern" "$out/err"; check "$name" $?
    [ $rc -ne 0 ] || cat "$out/err"
}
expect_error "missing file" "cannot open the trace file" "$bin" view "$out/nope.json" --png "$out/x.png"
head -c 700 "$trace" > "$out/truncated.json"
expect_error "truncated file" "not valid JSON" "$bin" view "$out/truncated.json" --png "$out/x.png"
echo '{"traceEvents":[{"name":"a","ph":"X","ts":1,"pid":0}]}' > "$out/nodur.json"
expect_error "event without dur" "traceEvents\[0\]" "$bin" view "$out/nodur.json" --png "$out/x.png"
expect_error "bad size" "WIDTHxHEIGHT" "$bin" view "$trace" --png "$out/x.png" --size 12
expect_error "bad panel" "unknown panel" "$bin" view "$trace" --png "$out/x.png" --panel nope
expect_error "bad device" "matches no device" "$bin" view "$trace" --png "$out/x.png" --device nosuchgpu
expect_error "no display suggests --png" "--png" env -u DISPLAY -u WAYLAND_DISPLAY "$bin" view "$trace" --exit-after 1
expect_error "missing font names the package" "fonts-dejavu-core" \
    env VKT_FONT=/nonexistent/font.ttf "$bin" view "$trace" --png "$out/x.png" --device "$d"
# A validation message fails the command: best-practices checks always warn about something.
expect_error "a validation message fails the command" "validation message" \
    env VKT_VALIDATION=1 VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT \
    "$bin" view "$trace" --png "$out/x.png" --device "$d"

# ---------------------------------------------------------------------------------------------
# The window, under Xvfb.
if ! command -v Xvfb > /dev/null || ! command -v xwd > /dev/null; then
    if [ $in_ci -eq 1 ]; then
        echo "FAIL CI=true but Xvfb or xwd is missing (scripts/setup.sh test installs xvfb and x11-apps)"
        fails=$((fails + 1))
    else
        echo "note: Xvfb or xwd missing: the window is not tested"
    fi
    echo "test_viewer: $fails failed"
    [ $fails -eq 0 ]
    exit
fi
start_xvfb "$out"; check "Xvfb $display started" $?

# wait_for FILE PATTERN SECONDS
wait_for() {
    for _ in $(seq $(($3 * 10))); do grep -q -- "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
    return 1
}

for d in "${devices[@]}"; do
    start=$(date +%s)
    DISPLAY=$display VKT_VALIDATION=1 "$bin" view "$trace" --exit-after 2 --device "$d" \
        --layout "$out/win-$d.layout.json" > /dev/null 2> "$out/win-$d.err" &
    pid=$!
    wait_for "$out/win-$d.err" "showing" 60; check "$d window: shows a frame" $?
    sleep 0.3
    xwd -root -display "$display" -silent > "$out/win-$d.xwd"; check "$d window: screenshot" $?
    wait "$pid"
    rc=$?
    elapsed=$(($(date +%s) - start))
    cat "$out/win-$d.err"
    [ $rc -eq 0 ] && ! grep -qi validation "$out/win-$d.err"; check "$d window: exits 0 with no validation message" $?
    [ $elapsed -lt 60 ]; check "$d window: closed by itself (${elapsed}s)" $?
    python3 "$checker" "$out/win-$d.xwd" "$trace" "$out/win-$d.layout.json" --offset 0,0 --compare "$out/$d.png"
    check "$d window: same picture as the PNG" $?
done

# Live: --replay plays the trace back as a running training would feed it (a thread appends,
# the window redraws). Then keys and a resize, sent through the XTEST extension (libXtst, which
# most X installations have).
full=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['timeline']['t1_us'])" "$out/$d.layout.json")
if python3 -c "import ctypes; ctypes.CDLL('libXtst.so.6'); ctypes.CDLL('libX11.so.6')" 2> /dev/null; then
    dk=${devices[0]:-llvmpipe}
    lay="$out/live.layout.json"
    DISPLAY=$display "$bin" view "$trace" --replay 6 --exit-after 40 --device "$dk" --layout "$lay" \
        > /dev/null 2> "$out/live.err" &
    pid=$!
    wait_for "$out/live.err" "showing" 60
    x11() { # x11 ACTION ARGS: keys K1 K2 ... | resize W H
        python3 - "$display" "$@" <<'PY'
import ctypes, sys, time
disp, action, args = sys.argv[1], sys.argv[2], sys.argv[3:]
x11, xt = ctypes.CDLL("libX11.so.6"), ctypes.CDLL("libXtst.so.6")
x11.XOpenDisplay.restype = ctypes.c_void_p
x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
x11.XStringToKeysym.restype = ctypes.c_ulong
x11.XStringToKeysym.argtypes = [ctypes.c_char_p]
x11.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
x11.XDefaultRootWindow.restype = ctypes.c_ulong
x11.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
x11.XFlush.argtypes = [ctypes.c_void_p]
xt.XTestFakeKeyEvent.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_ulong]
xt.XTestFakeMotionEvent.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong]
d = x11.XOpenDisplay(disp.encode())
if not d:
    sys.exit("cannot open display " + disp)
# No window manager: the keyboard follows the pointer, so the pointer goes over the window.
xt.XTestFakeMotionEvent(d, -1, 600, 400, 0)
x11.XFlush(d)
time.sleep(0.2)
if action == "keys":
    for k in args:
        code = x11.XKeysymToKeycode(d, x11.XStringToKeysym(k.encode()))
        xt.XTestFakeKeyEvent(d, code, 1, 0)
        xt.XTestFakeKeyEvent(d, code, 0, 0)
        x11.XFlush(d)
        time.sleep(0.25)
elif action == "resize":
    # The viewer's window is a child of the root (no window manager); find it by its name.
    root = x11.XDefaultRootWindow(d)
    r, p = ctypes.c_ulong(), ctypes.c_ulong()
    kids, n = ctypes.POINTER(ctypes.c_ulong)(), ctypes.c_uint()
    x11.XQueryTree.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(ctypes.c_ulong),
                               ctypes.POINTER(ctypes.c_ulong), ctypes.POINTER(ctypes.POINTER(ctypes.c_ulong)),
                               ctypes.POINTER(ctypes.c_uint)]
    x11.XQueryTree(d, root, ctypes.byref(r), ctypes.byref(p), ctypes.byref(kids), ctypes.byref(n))
    x11.XFetchName.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(ctypes.c_char_p)]
    x11.XResizeWindow.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_uint, ctypes.c_uint]
    found = 0
    for i in range(n.value):
        name = ctypes.c_char_p()
        if x11.XFetchName(d, kids[i], ctypes.byref(name)) and name.value and b"vktrain" in name.value:
            x11.XResizeWindow(d, kids[i], int(args[0]), int(args[1]))
            found += 1
    x11.XFlush(d)
    sys.exit(0 if found == 1 else f"found {found} vktrain windows")
PY
    }
    span() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['timeline']['t1_us'])" "$lay"; }
    layout_is() { # python expression on the layout dict L, polled for up to 15 s
        for _ in $(seq 150); do
            python3 -c "import json,sys; L=json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$lay" 2> /dev/null && return 0
            sleep 0.1
        done
        cat "$lay"
        return 1
    }
    layout_is "'timeline' in L"
    first=$(span)
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$first" "$full"
    check "live: the first frame shows part of the run ($first of $full us)" $?
    x11 keys space
    sleep 1
    paused1=$(span)
    sleep 1.5
    paused2=$(span)
    [ "$paused1" = "$paused2" ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$paused2" "$full"
    check "live: Space pauses the picture ($paused1 -> $paused2 us)" $?
    x11 keys space
    layout_is "abs(L['timeline']['t1_us'] - $full) < 1"; check "live: after Space again it catches up with the whole run" $?
    sleep 0.3
    xwd -root -display "$display" -silent > "$out/live.xwd"
    python3 "$checker" "$out/live.xwd" "$trace" "$lay" --offset 0,0; check "live: the replayed picture matches the trace" $?

    x11 keys 2; layout_is "L['panel'] == 'timeline'"; check "key 2: timeline panel" $?
    x11 keys equal equal; layout_is "abs((L['timeline']['t1_us'] - L['timeline']['t0_us']) - $full / 2.25) < 0.01 * $full"
    check "key + twice: zoomed in 2.25x" $?
    x11 keys Right; layout_is "L['timeline']['t0_us'] > 0.3 * $full"; check "right arrow: pans later" $?
    sleep 0.3
    xwd -root -display "$display" -silent > "$out/zoom.xwd"
    python3 "$checker" "$out/zoom.xwd" "$trace" "$lay" --offset 0,0; check "zoomed window matches the trace" $?
    x11 keys Tab; layout_is "L['panel'] == 'devices'"; check "Tab: next panel" $?
    x11 keys 1 0; layout_is "L['panel'] == 'overview' and L['timeline']['t0_us'] == 0 and abs(L['timeline']['t1_us'] - $full) < 1"
    check "keys 1 and 0: overview, zoom reset" $?
    x11 resize 960 600; layout_is "L['width'] == 960 and L['height'] == 600"; check "resize: the picture follows the window" $?
    sleep 0.3
    xwd -root -display "$display" -silent > "$out/resized.xwd"
    python3 "$checker" "$out/resized.xwd" "$trace" "$lay" --offset 0,0; check "resized window matches the trace" $?
    x11 keys Escape
    wait "$pid"; check "Esc closes the window, exit status 0" $?
    cat "$out/live.err"
    ! grep -qi validation "$out/live.err"; check "live window: no validation message" $?
elif [ "${CI:-}" = true ]; then
    echo "FAIL: CI=true but libXtst is missing (scripts/setup.sh test installs libxtst6)"
    fails=$((fails + 1))
else
    echo "note: libXtst missing: live replay, keys and resizing not tested"
fi

echo "test_viewer: $fails failed"
[ $fails -eq 0 ]
