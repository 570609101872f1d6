#!/usr/bin/env bash
# test_cli_model.sh: `vktrain model FILE [--json | --torch]` on every shipped model: the table
# and the JSON agree with the parameter counts the model files state, nested layers are listed
# with their PyTorch paths, and the --torch expression builds a torch.nn module whose
# state_dict has exactly the tensors (names and shapes) of a vktrain checkpoint of that model
# (gpt2_small: its parameter count, and the names through the same blocks with a byte vocabulary
# and T = 64, since one step of GPT-2 small takes minutes on a CPU driver). A missing or malformed file exits non-zero with the file named. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bin" model "$src/assets/models/residual_mlp.json" > "$work/table.txt"
check "model prints a table" $?
cat "$work/table.txt"
grep -q "466698 parameters" "$work/table.txt" && grep -Eq "^  2\.1 +relu" "$work/table.txt"
check "the table counts residual_mlp's 466,698 parameters and lists nested layers by path" $?

"$bin" model "$src/assets/models/big_mlp.json" --json > "$work/big.json"
check "model --json" $?
python3 - "$work/big.json" <<'PY'; check "big_mlp: 53,600,266 parameters, [1, 28, 28] flattened to 784" $?
import json, sys
m = json.load(open(sys.argv[1]))
assert m["parameters"] == 53600266, m["parameters"]
assert m["input"] == "[1, 28, 28]" and m["layers"][0]["type"] == "flatten", m["layers"][0]
assert m["layers"][1]["in"] == "[784]", m["layers"][1]
assert sum(l["parameters"] for l in m["layers"]) == m["parameters"]
PY

need_torch
for m in "$src"/assets/models/*.json; do
    name=$(basename "$m" .json)
    if [ "$name" = gpt2_small ]; then
        # GPT-2 small does not train a step in a test's time on one CPU device (3.4 GiB; in three
        # stages about a minute a step): its parameter count is checked against the torch module
        # of the file itself, and its tensors' names through the same blocks with a vocabulary of
        # bytes and T = 64, trained one step on text below.
        /usr/bin/python3 - "$bin" "$m" "$src/scripts" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[3])
import vkt_torch
module, spec = vkt_torch.build(sys.argv[1], sys.argv[2])
n = sum(v.numel() for v in module.parameters())
want = json.loads(os.popen("'%s' model '%s' --json" % (sys.argv[1], sys.argv[2])).read())["parameters"]
assert n == want == 163037184, (n, want)
print("gpt2_small.json: the torch module has %d parameters" % n)
PY
        check "gpt2_small: the --torch module has the model's 163,037,184 parameters" $?
        python3 - "$m" > "$work/gpt2_bytes.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"], m["input"] = "gpt2_bytes", [64]
m["layers"][0]["num_embeddings"] = 256
m["layers"][1]["max_len"] = 64
m["layers"][-1]["units"] = 256
print(json.dumps(m))
PY
        m=$work/gpt2_bytes.json name=gpt2_bytes
    fi
    # A checkpoint of the model's initial parameters, to compare the names and shapes with.
    "$bin" train --model "$m" --max-steps 1 --epochs 1 --limit-train 8 --batch 8 --no-eval \
        --quiet --device llvmpipe --save "$work/$name.safetensors" > /dev/null 2> "$work/$name.err"
    rc=$?
    [ $rc -eq 0 ] || cat "$work/$name.err"
    check "$name: one training step saves a checkpoint" $rc
    /usr/bin/python3 - "$bin" "$m" "$work/$name.safetensors" "$src/scripts" <<'PY'
import json, os, struct, sys
sys.path.insert(0, sys.argv[4])
import vkt_torch
module, spec = vkt_torch.build(sys.argv[1], sys.argv[2])
have = {k: list(v.shape) for k, v in module.state_dict().items()}
n = sum(v.numel() for v in module.parameters())  # trained parameters, not buffers
want_n = json.loads(os.popen("'%s' model '%s' --json" % (sys.argv[1], sys.argv[2])).read())["parameters"]
assert n == want_n, (n, want_n)
data = open(sys.argv[3], "rb").read()
hdr = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
ck = {k: v["shape"] for k, v in hdr.items() if k != "__metadata__"}
assert ck == have, (sorted(ck.items()), sorted(have.items()))
print("%s: %d tensors, %d parameters" % (os.path.basename(sys.argv[2]), len(have), n))
PY
    check "$name: the --torch module has the checkpoint's tensors and the model's parameter count" $?
done

"$bin" model "$work/none.json" 2> "$work/err"
[ $? -ne 0 ] && grep -q "none.json" "$work/err"
check "a missing model file: non-zero exit naming it" $?
echo '{"input": [4], "layers": [{"type": "residual", "layers": [{"type": "dense", "units": 3}]}], "loss": "mse"}' > "$work/bad.json"
"$bin" model "$work/bad.json" 2> "$work/err"
[ $? -ne 0 ] && grep -q "layers\[0\].layers: the body turns" "$work/err"
check "a residual body that changes the shape: non-zero exit with the JSON path" $?
"$bin" model 2> /dev/null
[ $? -eq 2 ]
check "no file: usage error" $?
[ "$fails" -eq 0 ]
