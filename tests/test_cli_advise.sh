#!/usr/bin/env bash
# test_cli_advise.sh: `vktrain advise` on bench suite results written here (fixtures in the result
# format, version 1, with figures of this machine's order: lavapipe ~100 GFLOP/s peak FMA and
# ~20 GB/s, fashion_mlp ~30k samples/s at batch 128) and the device profiles of assets/devices/.
#  - fashion_mlp at batch 100 fits both drivers: the faster is recommended with the samples/s
#    interpolated in log batch between its measured batches 64 and 128 (checked against the
#    formula computed here); the roofline beside each measurement, its error recomputed here from
#    `vktrain model --json` and the planner's bytes; fashion_cnn's error at every measured batch;
#  - a device with no results (the H200 profile) prints "predicted (roofline)", never measured;
#    the TPU profile is named as no Vulkan device and never recommended;
#  - gpt2_small at batch 8 under --mem-limit 256M: no single device fits, and no layers split
#    either (its embedding and head layers alone need more than 256 MiB: parameters, gradients and
#    momentum of 38.6M parameters each); advise says so with the layer and the smallest limit at
#    which a split exists; at that limit it names a layers split, K devices and the bytes of every
#    stage, each under the limit, and `vktrain plan` over K llvmpipe devices gives the same bytes;
#  - refusals: another format version, another format, a missing file, invalid JSON, an unknown
#    profile, a bad profile, bad flags.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$(realpath "$1") src=$(realpath "$2")
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS, expect_error
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=$src/assets/models
cd "$src" # profiles by name: assets/devices/NAME.json

# The device names of this machine (the results' devices are matched by name for their
# storage-buffer alignment, as `vktrain plan` takes it from the device).
"$bin" devices --json > "$work/devices.json" 2> /dev/null
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
try:
    devs = json.load(open(work + "/devices.json"))
except Exception:
    devs = []
def name(part, default):
    for d in devs:
        if part in d["name"].lower():
            return d["name"], d["driver"]
    return default, default
def result(label, part, fma, bw, train):
    n, drv = name(part, label)
    return {"format": "vktrain-bench-suite", "version": 1, "created": "2026-12-01T18:00:00Z",
            "command": "vktrain bench suite --device %s --out r.json" % part, "quick": True,
            "vktrain_version": "0.1.0",
            "host": {"os": "Linux", "cpu": "test fixture", "cores": 2, "memory_bytes": 25769803776,
                     "hostname": "fixture"},
            "device": {"label": label, "name": n, "driver": drv, "api_version": "1.3.230",
                       "vendor_id": 65541, "device_id": 0, "type": "cpu",
                       "memory_bytes": 2147483648, "mem_limit_bytes": None},
            "peak": {"fma_gflops": fma, "bandwidth_gbs": bw},
            "matmul": [{"size": 256, "form": "NN", "variant": "t", "median_ms": 0.9, "gflops": 37.2,
                        "fraction_of_peak": 0.39}],
            "train": train, "saturation": []}
def runs(model, params, flops, pts, stop=None):
    out = [{"model": model, "parameters": params, "flops_per_sample": flops, "batch": b, "fits": True,
            "planned_bytes": 1000000 * b, "steps": 20, "samples_per_sec": s, "step_ms": 1000.0 * b / s,
            "split": {"matmul": 0.5, "attention": 0.0, "other_kernels": 0.1, "communication": 0.0,
                      "host_and_idle": 0.4}, "peak_memory_bytes": 1000000 * b} for b, s in pts]
    if stop:
        out.append({"model": model, "parameters": params, "flops_per_sample": flops, "batch": stop,
                    "fits": False, "planned_bytes": 3000000000, "reason": "needs more"})
    return out
mlp = (535818, 3212544)
cnn = (421738, 26312832)
lav = runs("fashion_mlp", *mlp, [(1, 610.0), (16, 8200.0), (64, 21000.0), (128, 30000.0),
                                 (256, 33000.0)], 8192) + \
      runs("fashion_cnn", *cnn, [(1, 35.0), (16, 420.0), (128, 760.0)])
sws = runs("fashion_mlp", *mlp, [(1, 240.0), (16, 2900.0), (64, 7400.0), (128, 11000.0),
                                 (256, 12500.0)]) + \
      runs("fashion_cnn", *cnn, [(1, 12.0), (16, 130.0), (128, 240.0)])
json.dump(result("llvmpipe", "llvmpipe", 96.3, 21.5, lav), open(work + "/lavapipe.json", "w"), indent=1)
json.dump(result("SwiftShader", "swiftshader", 38.0, 9.8, sws), open(work + "/swiftshader.json", "w"), indent=1)
# Refused ones: a newer version, another format, invalid JSON; a profile of another version.
r = json.load(open(work + "/lavapipe.json")); r["version"] = 2
json.dump(r, open(work + "/v2.json", "w"))
r["version"] = 1; r["format"] = "something-else"
json.dump(r, open(work + "/other.json", "w"))
open(work + "/cut.json", "w").write(open(work + "/lavapipe.json").read()[:200])
p = json.load(open("assets/devices/nvidia_h200_sxm.json")); p["version"] = 7
json.dump(p, open(work + "/profile_v7.json", "w"))
del p["source"]; p["version"] = 1
json.dump(p, open(work + "/profile_nosource.json", "w"))
PY
check "fixtures written" $?
lav=$work/lavapipe.json sws=$work/swiftshader.json

"$bin" model "$models/fashion_mlp.json" --json > "$work/mlp_model.json"
"$bin" model "$models/fashion_cnn.json" --json > "$work/cnn_model.json"

# ---- fits one device: interpolation, the recommendation, the roofline against the measurements
"$bin" advise --model "$models/fashion_mlp.json" --batch 100 --results "$lav" "$sws" --json \
    > "$work/mlp.json"
check "advise fashion_mlp batch 100 on two results" $?
"$bin" advise --model "$models/fashion_mlp.json" --batch 100 --results "$lav" "$sws" \
    > "$work/mlp.txt"
check "the same as text" $?
python3 - "$work" <<'PY'; check "interpolated samples/s, recommendation, roofline error recomputed" $?
import json, math, sys
work = sys.argv[1]
a = json.load(open(work + "/mlp.json"))
m = json.load(open(work + "/mlp_model.json"))
d = {x["label"]: x for x in a["devices"]}
lav, sws = d["llvmpipe"], d["SwiftShader"]
# Hand computation: linear in log(batch) between the measured batches 64 and 128.
t = (math.log(100) - math.log(64)) / (math.log(128) - math.log(64))
want = 21000 + t * (30000 - 21000)
got = lav["prediction"]["samples_per_sec"]
print("llvmpipe at batch 100: %.3f samples/s interpolated (by hand %.3f)" % (got, want))
assert lav["prediction"]["basis"] == "interpolated" and abs(got - want) < 1e-6 * want, lav["prediction"]
assert "64" in lav["prediction"]["how"] and "128" in lav["prediction"]["how"], lav["prediction"]["how"]
ws = 7400 + t * (11000 - 7400)
assert abs(sws["prediction"]["samples_per_sec"] - ws) < 1e-6 * ws
assert lav["single"]["plan_fits"] and sws["single"]["plan_fits"]
rec = a["recommended"]
assert rec["device"] == "llvmpipe" and rec["strategy"] == "single", rec
assert abs(rec["samples_per_sec"] - want) < 1e-6 * want and rec["basis"] == "interpolated", rec
# The roofline: max(FLOPs / peak, bytes / bandwidth), bytes = 2 x (params + grads + optimizer
# bytes) + 4 B (2 saved + inputs), with the measured peaks of the results.
for dev, fma, bw in ((lav, 96.3, 21.5), (sws, 38.0, 9.8)):
    s = dev["single"]
    state = s["parameters_bytes"] + s["gradients_bytes"] + s["optimizer_bytes"]
    assert s["parameters_bytes"] >= 4 * m["parameters"] and s["optimizer_bytes"] == s["parameters_bytes"]
    for c in dev["roofline_check"]:
        B = c["batch"]
        t_c = m["flops_per_sample"] * B / (fma * 1e9)
        t_m = (2 * state + 4 * B * (2 * m["saved_floats_per_sample"] + 784)) / (bw * 1e9)
        pred = B / max(t_c, t_m)
        assert abs(c["roofline"] - pred) < 1e-9 * pred and abs(c["ratio"] - pred / c["measured"]) < 1e-9, (c, pred)
    B = 100
    pred = B / max(m["flops_per_sample"] * B / (fma * 1e9),
                   (2 * state + 4 * B * (2 * m["saved_floats_per_sample"] + 784)) / (bw * 1e9))
    assert abs(dev["roofline"]["samples_per_sec"] - pred) < 1e-9 * pred
    err = dev["roofline_error"]
    assert abs(err - pred / dev["prediction"]["samples_per_sec"]) < 1e-9, err
    print("%s fashion_mlp batch 100: roofline %.0f, interpolated %.0f: predicted/measured %.2f"
          % (dev["label"], pred, dev["prediction"]["samples_per_sec"], err))
PY
tail -1 "$work/mlp.txt" | grep -q "^recommended: llvmpipe, single: .*samples/s (interpolated)"
check "text: the recommendation is the last line, with the numbers" $?
grep -q "predicted/measured" "$work/mlp.txt" && grep -q "interpolated in log batch between measured batches 64" "$work/mlp.txt"
check "text: the roofline beside the measurement, with its error" $?

# fashion_cnn: the roofline against each driver's measured samples/s (the acceptance's check).
"$bin" advise --model "$models/fashion_cnn.json" --batch 128 --results "$lav" "$sws" --json \
    > "$work/cnn.json"
check "advise fashion_cnn batch 128" $?
python3 - "$work" <<'PY'; check "fashion_cnn: measured at batch 128, roofline error at every measured batch" $?
import json, sys
a = json.load(open(sys.argv[1] + "/cnn.json"))
for d in a["devices"]:
    p = d["prediction"]
    assert p["basis"] == "measured" and p["how"] == "measured at batch 128", p
    assert len(d["roofline_check"]) == 3 and all(c["ratio"] > 1 for c in d["roofline_check"]), d["roofline_check"]
    print("%s fashion_cnn roofline/measured:" % d["label"],
          ", ".join("batch %d %.2f" % (c["batch"], c["ratio"]) for c in d["roofline_check"]))
PY

# ---- devices without results: the roofline, marked predicted; a model the results do not hold
"$bin" advise --model "$models/fashion_mlp.json" --batch 128 --device-profile nvidia_h200_sxm \
    google_tpu_v5e > "$work/prof.txt"
check "advise on two profiles" $?
grep -q "samples/s: .* predicted (roofline)" "$work/prof.txt" && ! grep -qi "measured at" "$work/prof.txt"
check "a profile-only device prints predicted (roofline), never measured" $?
grep -q "NOT a vktrain device: a TPU has no Vulkan driver" "$work/prof.txt" &&
    tail -1 "$work/prof.txt" | grep -q "^recommended: H200, single:.*predicted (roofline)"
check "the TPU is named as no Vulkan device; the H200 is recommended, as predicted" $?
"$bin" advise --model "$models/char_gpt.json" --batch 4 --results "$lav" --json > "$work/lm.json"
check "advise for a model the results do not hold" $?
python3 - "$work/lm.json" <<'PY'; check "no points of the model: the roofline from the measured peaks" $?
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
assert d["prediction"]["basis"] == "roofline" and "no run of char_gpt" in d["data_note"], d
assert "roofline_error" not in d and d["roofline_check"] == [], d
PY

# ---- gpt2_small at batch 8 under 256M: nothing fits, and advise says from which limit a split does
gpt2=$models/gpt2_small.json
"$bin" advise --model "$gpt2" --batch 8 --mem-limit 256M --results "$lav" --json > "$work/g256.json"
rc=$?
"$bin" advise --model "$gpt2" --batch 8 --mem-limit 256M --results "$lav" > "$work/g256.txt"
check "gpt2_small under 256M: exit 1, nothing fits" "$([ $rc -eq 1 ] && echo 0 || echo 1)"
python3 - "$work/g256.json" <<'PY'; check "gpt2_small 256M: no single device, no split: the layer and the smallest limit" $?
import json, sys
a = json.load(open(sys.argv[1]))
d = a["devices"][0]
assert a["parameters"] == 163037184 and not d["single"]["plan_fits"]
assert d["single"]["bytes_needed"] > 256 * 2**20 == d["limit_bytes"]
s = d["split"]
assert not s["found"] and s["largest_layer_memory"]["bytes_needed"] > 256 * 2**20, s
# The untied head: 768 x 50257 weights, each with a gradient and a momentum buffer.
lm = s["largest_layer_memory"]
assert s["largest_layer"] == 27 and lm["parameters_bytes"] >= 4 * 768 * 50257, s
assert lm["gradients_bytes"] == lm["optimizer_bytes"] == lm["parameters_bytes"], lm
assert s["min_limit_bytes"] > 256 * 2**20 and 2 <= s["min_limit_devices"] <= 16, s
assert a["recommended"]["strategy"] == "none", a["recommended"]
print(a["recommended"]["why"])
open(sys.argv[1] + ".limit", "w").write("%d" % (s["min_limit_bytes"] // 2**20))
PY
tail -1 "$work/g256.txt" | grep -q "^recommended: none: gpt2_small at batch 8 fits on none"
check "text: the recommendation says none, with the numbers" $?
limit=$(cat "$work/g256.json.limit")M
"$bin" advise --model "$gpt2" --batch 8 --mem-limit "$limit" --results "$lav" --json > "$work/gmin.json"
check "gpt2_small batch 8 at the limit advise named ($limit)" $?
python3 - "$work/gmin.json" "$limit" <<'PY'; check "a layers split: K devices, every stage's bytes under the limit" $?
import json, sys
a = json.load(open(sys.argv[1]))
d = a["devices"][0]
s = d["split"]
assert s["found"] and s["strategy"] == "layers" and len(s["stages"]) == s["devices"] >= 2, s
lim = d["limit_bytes"]
assert all(st["bytes_needed"] <= lim for st in s["stages"]), s["stages"]
assert max(st["bytes_needed"] for st in s["stages"]) == s["largest_bytes"]
M, K = s["micro_batches"], s["devices"]
assert abs(s["bubble_fraction"] - (K - 1) / (M + K - 1)) < 1e-12
assert a["recommended"]["strategy"] == "layers" and a["recommended"]["devices"] == K
print("split: %d devices, %d micro-batches (%s), largest stage %.1f MiB of %.1f MiB; %s" %
      (K, M, s["schedule"], s["largest_bytes"] / 2**20, lim / 2**20, a["recommended"]["why"]))
open(sys.argv[1] + ".plan", "w").write("%d %d %s" % (K, M, s["schedule"]))
PY
read -r K M sched < "$work/gmin.json.plan"
devs=$(printf 'llvmpipe,%.0s' $(seq "$K")); devs=${devs%,}
"$bin" plan --model "$gpt2" --batch 8 --device "$devs" --mem-limit "$limit" --micro-batches "$M" \
    --schedule "$sched" --json > "$work/plan.json"
check "vktrain plan over the same $K devices" $?
python3 - "$work/gmin.json" "$work/plan.json" <<'PY'; check "plan gives the same stages and bytes per device" $?
import json, sys
s = json.load(open(sys.argv[1]))["devices"][0]["split"]
p = {x["strategy"]: x for x in json.load(open(sys.argv[2]))["strategies"]}["layers"]
assert p["fits"], p
for a, b in zip(s["stages"], p["devices"]):
    for k in ("bytes_needed", "parameters_bytes", "gradients_bytes", "optimizer_bytes",
              "activations_bytes", "first_layer", "last_layer"):
        assert a[k] == b[k], (k, a, b)
assert len(s["stages"]) == len(p["devices"])
PY

# ---- refusals
expect_error "a result of another version is refused, naming the file and both versions" \
    "v2.json: vktrain bench suite result format version 2, but this vktrain .* reads version 1" \
    advise --model "$models/fashion_mlp.json" --batch 8 --results "$work/v2.json"
expect_error "a file of another format is refused" 'not a vktrain bench suite result (its "format" is "something-else"' \
    advise --model "$models/fashion_mlp.json" --batch 8 --results "$work/other.json"
expect_error "a missing results file" "cannot open results file $work/none.json" \
    advise --model "$models/fashion_mlp.json" --batch 8 --results "$work/none.json"
expect_error "a cut JSON file" "cut.json: not JSON" \
    advise --model "$models/fashion_mlp.json" --batch 8 --results "$work/cut.json"
expect_error "an unknown profile names the profiles there" 'no device profile "nosuch".*nvidia_h200_sxm' \
    advise --model "$models/fashion_mlp.json" --batch 8 --device-profile nosuch
expect_error "a profile of another version" "profile_v7.json: vktrain device profile format version 7, but this vktrain .* reads version 1" \
    advise --model "$models/fashion_mlp.json" --batch 8 --device-profile "$work/profile_v7.json"
expect_error "a profile without its source" "source is missing, expected the vendor's document" \
    advise --model "$models/fashion_mlp.json" --batch 8 --device-profile "$work/profile_nosource.json"
expect_error "no --batch" "which batch size" advise --model "$models/fashion_mlp.json" --results "$lav"
expect_error "--devices out of range" "--devices takes" \
    advise --model "$models/fashion_mlp.json" --batch 8 --results "$lav" --devices 17
expect_error "a missing model" "cannot open" advise --model "$work/nomodel.json" --batch 8 --results "$lav"

[ "$fails" -eq 0 ] && echo "test_cli_advise: all checks passed" || echo "test_cli_advise: $fails FAILED"
exit $((fails > 0))
