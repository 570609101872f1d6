#!/usr/bin/env bash
# test_cli_devices.sh: the CLI's device listing and its errors. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin" --version | grep '^vktrain [0-9]' > /dev/null; check "--version" $?
"$bin" --help | grep 'devices' > /dev/null; check "--help lists commands" $?
"$bin" no-such-command >/dev/null 2>&1; [ $? -ne 0 ]; check "unknown command fails" $?

"$bin" devices > "$out/table"; check "devices runs" $?
grep -qi llvmpipe "$out/table"; check "table lists llvmpipe" $?

"$bin" devices --json > "$out/devices.json"; check "devices --json runs" $?
python3 - "$out/devices.json" <<'PY'; check "json: lavapipe and SwiftShader with distinct vendor_ids, all fields" $?
import json, sys
devs = json.load(open(sys.argv[1]))
need = ["index", "name", "vendor_id", "device_id", "type", "driver", "api_version", "memory_bytes",
        "subgroup_size", "subgroup_shuffle", "max_workgroup_invocations", "shared_memory_bytes",
        "timestamp_period_ns"]
for d in devs:
    missing = [k for k in need if k not in d]
    assert not missing, f"missing {missing} in {d}"
    assert d["type"] in ("cpu", "discrete", "integrated", "virtual", "other")
lvp = [d for d in devs if "llvmpipe" in d["name"].lower()]
ss = [d for d in devs if "swiftshader" in d["name"].lower()]
assert lvp and ss, f"want lavapipe and SwiftShader, got {[d['name'] for d in devs]}"
assert lvp[0]["vendor_id"] != ss[0]["vendor_id"]
assert lvp[0]["vendor_id"] == 0x10005 and ss[0]["vendor_id"] == 0x1ae0
# lavapipe's matmul kernels shuffle a's tile across its 8-lane subgroups (engine/ops/matmul.c).
assert lvp[0]["subgroup_shuffle"] is True and lvp[0]["subgroup_size"] >= 8, lvp[0]
PY

# Selection: names, the lavapipe alias, indices, duplicates.
"$bin" devices --json --device lavapipe,SwiftShader,lavapipe > "$out/sel.json"; check "select by name" $?
python3 -c "
import json,sys; d=json.load(open('$out/sel.json'))
assert [x['name'].split()[0] for x in d] == ['llvmpipe','SwiftShader','llvmpipe'], d" ; check "selection order and duplicates" $?

# A --device that matches nothing: non-zero, and the message lists the devices.
"$bin" devices --device nosuchgpu > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'matches no device' "$out/err" && grep -qi 'llvmpipe' "$out/err"; check "bad --device lists devices" $?
"$bin" devices --device 99 > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'matches no device' "$out/err"; check "out-of-range index" $?

# No Vulkan driver at all: one clear sentence, with how to install one, and non-zero.
VK_ICD_FILENAMES=/nonexistent VK_DRIVER_FILES=/nonexistent VK_ADD_DRIVER_FILES= "$bin" devices > /dev/null 2> "$out/err"; rc=$?
cat "$out/err"
[ $rc -ne 0 ] && grep -q 'no Vulkan device found' "$out/err" && grep -q 'mesa-vulkan-drivers' "$out/err" \
    && [ "$(grep -c . "$out/err")" -eq 1 ]; check "no driver: one clear line" $?

echo "test_cli_devices: $fails failed"
[ $fails -eq 0 ]
