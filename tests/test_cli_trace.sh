#!/usr/bin/env bash
# test_cli_trace.sh: a short training on two devices (lavapipe + SwiftShader, layers, 2
# micro-batches) with --trace. Checks the trace file (every device present, events ordered and
# not overlapping per device, the union of each device's busy events equal to the busy time the
# trainer reports), renders it headless to PNG and checks the picture against the trace, then
# runs `vktrain train --view` under Xvfb and checks the live window's picture.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
xvfb_pid=""
trap '[ -n "$xvfb_pid" ] && kill $xvfb_pid 2> /dev/null; rm -rf "$work"' EXIT
model=$src/assets/models/fashion_mlp.json
run=(--model "$model" --limit-train 512 --batch 64 --epochs 1 --no-eval --quiet)

"$bin" train "${run[@]}" --device llvmpipe,swiftshader --strategy layers --micro-batches 2 \
    --trace "$work/trace.json" --json > "$work/result.json"
check "two-device training with --trace" $?

python3 - "$work/trace.json" "$work/result.json" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
result = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
ev = trace["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
devices = [d for d in trace["otherData"]["devices"]]
assert len(devices) == 2, devices
for d in devices:
    assert d["pid"] in procs, ("no process for device", d)
    print("device", d["pid"], procs[d["pid"]])
x = [e for e in ev if e.get("ph") == "X"]
summary = {s["pid"]: s for s in trace["otherData"]["summary"]}
for d in devices:
    pid = d["pid"]
    evs = [e for e in x if e["pid"] == pid]
    assert evs, ("no events for device", pid)
    cats = {e["cat"] for e in evs}
    assert {"forward", "backward", "optimizer"} <= cats, (pid, cats)
    # Ordered in the file and not overlapping: one queue per device, and the host-side events
    # (transfers, waits) sit between its submits. Slack: the clock calibration's uncertainty.
    ts = [e["ts"] for e in evs]
    assert ts == sorted(ts), ("events of device %d out of order" % pid)
    slack = max(2.0, d.get("clock_uncertainty_ns", 0) / 1000 * 2 + 2)
    for a, b in zip(evs, evs[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - slack, ("overlap", a, b)
    # Busy time: the union of non-wait events equals what the trainer reports.
    busy = 0.0
    end = -1e18
    for e in evs:
        if e["cat"] == "wait":
            continue
        s0, s1 = e["ts"], e["ts"] + e["dur"]
        if s1 > end:
            busy += s1 - max(s0, end)
            end = s1
    s = summary[pid]
    assert s["source"] == "trainer", s
    rel = abs(busy * 1000 - s["busy_ns"]) / s["busy_ns"]
    assert rel < 0.03, ("busy from the trace %.0f us, reported %.0f us" % (busy, s["busy_ns"] / 1000))
    frac = busy * 1000 / s["wall_ns"]
    reported = [r for r in result["devices"] if r["device"] == procs[pid]][0]["busy_fraction"]
    assert abs(frac - reported) < 0.03, (frac, reported)
    print("device %d: busy %.1f%% from the trace, %.1f%% reported; %d events" % (pid, 100 * frac, 100 * reported, len(evs)))
PY
check "trace structure: devices, order, no overlap, busy time consistent with the report" $?

# Headless picture of the two-device run, checked against the trace.
"$bin" view "$work/trace.json" --png "$work/trace.png" --device llvmpipe --layout "$work/layout.json" > /dev/null
check "renders the trace to PNG" $?
python3 "$src/tests/viewer_check.py" "$work/trace.png" "$work/trace.json" "$work/layout.json" --size 1280x720
check "the PNG shows each device's work where the trace says" $?

# ---------------------------------------------------------------------------------------------
# Device names (docs/PARALLELISM.md, "Naming devices"): a run's device at position k of --device
# is "#k NAME", with " (device I)" (its index in `vktrain devices`) on every device when some
# position is not its device's index. Three logical devices of one driver (replicated), and both
# orders of the two drivers (layers; one of the two orders has positions that differ from the
# indices, whichever way this machine enumerates them): the trace's process names and device
# list, train's device lines (text, or the --json result of the run above), `plan` and
# `devices --device`, and the viewer's row labels and utilisation and memory legends (the names
# it drew, from --layout) all carry the position, distinct per device.
"$bin" devices --json > "$work/devices.json"; check "devices --json for the names" $?
loud=(--model "$model" --limit-train 256 --batch 64 --epochs 1 --no-eval) # train's device lines
"$bin" train "${loud[@]}" --device llvmpipe,llvmpipe,llvmpipe --strategy replicated \
    --trace "$work/three.json" > "$work/three.out"
check "replicated on three logical llvmpipe devices with --trace" $?
"$bin" train "${loud[@]}" --device swiftshader,llvmpipe --strategy layers --micro-batches 2 \
    --trace "$work/sl.json" > "$work/sl.out"
check "layers on swiftshader,llvmpipe with --trace" $?
names() { # NAME SPEC TRACE TRAIN_OUTPUT (text, or json)
    local name=$1 spec=$2 trace=$3 out=$4
    "$bin" plan --model "$model" --device "$spec" > "$work/plan.out" &&
        "$bin" devices --json --device "$spec" > "$work/sel.json" &&
        "$bin" view "$trace" --png "$work/names.png" --device llvmpipe --layout "$work/names.layout.json" > /dev/null
    check "$name: plan, devices --device and view run" $?
    python3 - "$work/devices.json" "$spec" "$trace" "$out" "$work/plan.out" "$work/sel.json" \
        "$work/names.layout.json" <<'PY'
import json, re, sys
devices, spec, trace, out, plan, sel, layout = sys.argv[1:]
devs = json.load(open(devices))
def index(item):
    m = [d["index"] for d in devs if item.lower() in d["name"].lower()]
    assert m, ("no device", item)
    return m[0]
idx = [index(x) for x in spec.split(",")]
name = {d["index"]: d["name"] for d in devs}
moved = any(i != k for k, i in enumerate(idx))
want = ["#%d %s%s" % (k, name[i], " (device %d)" % i if moved else "") for k, i in enumerate(idx)]
print("expected:", want)
t = json.load(open(trace))
procs = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
assert [procs[k] for k in range(len(idx))] == want, ("trace process names", procs)
assert [d["name"] for d in t["otherData"]["devices"]] == want, ("trace devices", t["otherData"]["devices"])
text = open(out).read()
if text.lstrip().startswith("{") or "\n{" in text:
    r = json.loads(text.strip().splitlines()[-1])
    got = [d["device"] for d in r["devices"]]
else:
    got = re.findall(r"^  (#\d+ .*): busy", text, re.M)
assert got == want, ("train's device lines", got)
lines = open(plan).read()
for k, w in enumerate(want):  # every strategy's line for position k names it so
    assert re.search(r"^  " + re.escape(w) + r" +needs", lines, re.M), ("plan line", w, lines)
assert not re.search(r"^  #(\d+) (?!.*needs)", lines, re.M)
s = json.load(open(sel))
assert [(d["position"], d["index"], d["label"]) for d in s] == [(k, i, w) for k, (i, w) in enumerate(zip(idx, want))], s
L = json.load(open(layout))
for where in ("timeline", "utilisation", "memory"):
    shown = [n for n in L["names"] if n["where"] == where]
    assert [n["pid"] for n in shown] == list(range(len(idx))), (where, shown)
    nums = [re.match(r"#(\d+)( |$)", n["text"]) for n in shown]
    assert all(nums) and [int(m.group(1)) for m in nums] == list(range(len(idx))), (where, shown)
    if where == "timeline" and moved:  # the row says which device it ran on, however cut
        for n, i in zip(shown, idx):
            assert n["text"].endswith("(device %d)" % i), (where, n)
    print(where, [n["text"] for n in shown])
PY
    check "$name: each device's position in the trace, train, plan, devices and the viewer" $?
}
names "three llvmpipe" llvmpipe,llvmpipe,llvmpipe "$work/three.json" "$work/three.out"
names "swiftshader,llvmpipe" swiftshader,llvmpipe "$work/sl.json" "$work/sl.out"
names "llvmpipe,swiftshader" llvmpipe,swiftshader "$work/trace.json" "$work/result.json"

# train --view under Xvfb: the window appears, shows the live run, and closes by itself.
if ! command -v Xvfb > /dev/null || ! command -v xwd > /dev/null || ! command -v xwininfo > /dev/null; then
    if [ "${CI:-}" = true ]; then echo "FAIL CI=true but Xvfb/x11-apps are missing"; fails=$((fails + 1)); fi
else
    start_xvfb "$work"; check "Xvfb started" $?
    start=$(date +%s)
    DISPLAY=$display "$bin" train "${run[@]}" --limit-train 2048 --device llvmpipe --view --view-device swiftshader \
        --exit-after 12 > "$work/view.out" 2> "$work/view.err" &
    pid=$!
    found=1
    for _ in $(seq 300); do
        if xwininfo -root -tree -display "$display" 2> /dev/null | grep '"vktrain' > /dev/null; then found=0; break; fi
        sleep 0.1
    done
    check "train --view opens a window titled vktrain" $found
    # Xvfb's own log where the window did not appear (it goes with $work at exit): twice, in a
    # sanitizer run, Xvfb said :0 was up and the client could not open it (a server reset after
    # the polls' connections: start_xvfb now passes -noreset).
    if [ $found -ne 0 ]; then
        echo "Xvfb log:"
        cat "$work/xvfb.log"
        kill -0 "$xvfb_pid" 2> /dev/null && echo "Xvfb $xvfb_pid still running" || echo "Xvfb $xvfb_pid gone"
    fi
    cat > "$work/live_check.py" <<'PY'
# The live window is the same kind of picture: the title's text colour, and the forward and
# backward colours of the timeline, each over a good number of pixels.
import sys
sys.path.insert(0, sys.argv[1])
import json, viewer_check as vc
w, h, rows = vc.read_xwd(sys.argv[2])
lay = json.load(open(sys.argv[3]))
def count(c):
    n = 0
    for y in range(0, min(h, 720), 2):
        r = rows[y]
        for x in range(0, min(w, 1280), 2):
            p = (r[3 * x], r[3 * x + 1], r[3 * x + 2])
            if sum((a - b) ** 2 for a, b in zip(p, c)) < 900:
                n += 1
    return n
counts = {k: count(tuple(v)) for k, v in lay["categories"].items() if k in ("forward", "backward")}
counts["text"] = count(tuple(lay["text"]))
print("live window pixels:", counts)
sys.exit(0 if all(v > 50 for v in counts.values()) else 1)
PY
    # Screenshots until the live timeline holds a few steps (a loaded machine trains slowly).
    live=1
    for _ in $(seq 20); do
        sleep 0.5
        xwd -root -display "$display" -silent > "$work/live.xwd" 2> /dev/null || continue
        if python3 "$work/live_check.py" "$src/tests" "$work/live.xwd" "$work/layout.json"; then live=0; break; fi
    done
    wait $pid
    rc=$?
    cat "$work/view.err"
    took=$(($(date +%s) - start)) # before the test: a command substitution would reset $?
    [ $rc -eq 0 ]; check "train --view finishes (exit $rc) in $took s" $?
    ! grep -qi "validation" "$work/view.err"; check "train --view: no validation message" $?
    [ $live -eq 0 ]; check "the live window shows the timeline colours and text" $?
fi

echo "test_cli_trace: $fails failed"
[ $fails -eq 0 ]
