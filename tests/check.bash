# check.bash: sourced by the shell tests (tests/*.sh; this file is not one): the failure counter
# and check(), which prints "ok   NAME" or "FAIL NAME" for a status and counts the failures;
# need_torch; jfield, same_tensors and close_tensors, for results and checkpoints; expect_error, for the
# refusals of $bin (the test's binary; its output goes to $work/out and $work/err).
fails=0
check() { # check NAME CONDITION-STATUS
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
# need_torch: Debian's python3-torch (for /usr/bin/python3, whatever python3 is on PATH) or the
# end of the test: a failure under CI=true, else a skip (CTest's SKIP_RETURN_CODE 77).
need_torch() {
    /usr/bin/python3 -c "import torch" 2> /dev/null && return 0
    if [ "${CI:-}" = true ]; then
        echo "FAIL: CI=true but python3-torch is missing (scripts/setup.sh test installs it)"
        exit 1
    fi
    echo "SKIP: python3-torch is not installed (apt-get install python3-torch)"
    exit 77
}
# jfield FILE KEY: KEY of the JSON object on FILE's last line (a run's --json summary).
jfield() { python3 -c "import json,sys; print(json.loads(open('$1').read().strip().splitlines()[-1])['$2'])"; }
same_tensors() { # same_tensors A B: every tensor of A bit-identical in B
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    return {k: d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k] == b[k] for k in a) else 1)
PY
}
# expect_error NAME PATTERN ARGS...: "$bin" ARGS exits with an error (not a signal) and says PATTERN.
expect_error() {
    local name=$1 pattern=$2; shift 2
    "$bin" "$@" > "$work/out" 2> "$work/err"; local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qi -- "$pattern" "$work/err"; then
        echo "ok   $name: $(head -c 300 "$work/err")"
    else
        echo "FAIL $name (exit $rc): $(cat "$work/err")"; fails=$((fails + 1))
    fi
}
# close_tensors A B: within the strategies' tolerance: parameters |a - b| <= 2e-4 + 2e-3 |b|, optimizer state relative to its
# tensor's largest value; the same names and shapes.
close_tensors() { # close_tensors A B
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        b = d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        fmt = "<%d%s" % (len(b) // (4 if v["dtype"] == "F32" else 8), "f" if v["dtype"] == "F32" else "q")
        out[k] = (v["shape"], struct.unpack(fmt, b))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
worst = worst_opt = 0
for k in a:
    assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
    x, y = a[k][1], b[k][1]
    mx = max(abs(v) for v in y) if y else 0
    param = "exp_avg" not in k and "momentum" not in k
    for u, v in zip(x, y):
        tol = 2e-4 + 2e-3 * abs(v) if param else 1e-4 * mx + 2e-3 * abs(v)
        assert abs(u - v) <= tol, (k, u, v)
        if param: worst = max(worst, abs(u - v))
        else: worst_opt = max(worst_opt, abs(u - v) / mx)
print("%d tensors agree: parameters within %.2e, optimizer state within %.2e of its largest"
      % (len(a), worst, worst_opt))
PY
}

# start_xvfb DIR: an Xvfb of its own (1280x800x24) on a display it picks itself (-displayfd: no
# two tests racing for one number); sets display (":N") and xvfb_pid; returns non-zero, with
# Xvfb's log on stderr, when it is not up within 30 s. -noreset: by default an X server resets
# when its last client leaves, and a client that connects meanwhile is refused; the tests' polls
# for the window (xwininfo, one connection each) left it resetting while vktrain opened its own,
# slowest under ASan ("Failed to open display :0", twice in the suite's sanitizer run). Two
# loops of xwininfo against one Xvfb: 21 of 300 connections refused, none with -noreset.
start_xvfb() {
    display="" xvfb_pid=""
    Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp -noreset 3> "$1/xvfb.display" > "$1/xvfb.log" 2>&1 &
    xvfb_pid=$!
    for _ in $(seq 300); do
        n=$(tr -dc 0-9 < "$1/xvfb.display" 2> /dev/null)
        if [ -n "$n" ] && [ -S "/tmp/.X11-unix/X$n" ]; then display=:$n; return 0; fi
        sleep 0.1
    done
    echo "Xvfb did not start:" >&2
    cat "$1/xvfb.log" >&2
    return 1
}
