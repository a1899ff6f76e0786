#!/usr/bin/env bash
# kiln train's contract beyond the losses (test_train_torch.py checks those):
#   - a run stopped after 2 epochs with --checkpoint and continued with
#     --resume logs exactly (bitwise) what an uninterrupted run logs (an
#     MLP with BatchNorm and Dropout, and a CNN);
#   - --save writes a model ONNX Runtime loads and runs to kiln's outputs;
#   - --grad-accum, --clip-norm and every --lr-schedule: the right number of
#     steps, and the logged learning rates follow the schedule;
#   - on Vulkan (when there is one), where the weights and the optimizer's
#     state stay on the device between steps: resume is bitwise too, the
#     losses, evaluations and exported model match the cpu's, and so does
#     gradient accumulation (each of those reads the state back);
#   - bad data is a clear error before the first step: a missing input
#     array, missing targets, a wrong dtype, mismatched sample counts, a
#     class out of range.
#
#   test_train_cli.sh KILN SOURCE_DIR
#
# Needs /usr/bin/python3 with torch (the model) and numpy; ONNX Runtime from
# bench/.venv (scripts/python-venv.sh).
set -u
kiln=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$(cd "$2" && pwd)
py=${KILN_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import torch, numpy' > /dev/null 2>&1; then
  echo "FAIL: $py with torch and numpy is needed" >&2
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_train.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
"$py" - <<'EOF' 2> /dev/null || { echo "FAIL: making the model"; exit 1; }
import numpy as np, torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                          torch.nn.Linear(16, 5))
net.train()
torch.onnx.export(net, torch.zeros(2, 12), "mlp.onnx", input_names=["x"], output_names=["logits"],
                  dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
rng = np.random.default_rng(1)
x = rng.standard_normal((90, 12)).astype(np.float32)
y = rng.integers(0, 5, 90).astype(np.int64)
np.savez("train.npz", x=x, target=y)
np.savez("eval.npz", x=x[:40], target=y[:40])
np.save("x8.npy", x[:8])
np.save("x40.npy", x[:40])
np.savez("no_x.npz", target=y)
np.savez("no_target.npz", x=x)
np.savez("f64.npz", x=x.astype(np.float64), target=y)
np.savez("counts.npz", x=x, target=y[:80])
torch.manual_seed(0)
cnn = torch.nn.Sequential(torch.nn.Conv2d(2, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                          torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5))
cnn.train()
torch.onnx.export(cnn, torch.zeros(2, 2, 8, 8), "cnn.onnx", input_names=["x"], output_names=["logits"],
                  dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
np.savez("cnn.npz", x=rng.standard_normal((90, 2, 8, 8)).astype(np.float32), target=y)
bad = y.copy(); bad[17] = 5
np.savez("class.npz", x=x, target=bad)
EOF
fail=0
check() { # name, condition
  if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fail=1; fi
}
common=(mlp.onnx --data train.npz --loss cross_entropy --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 16
        --shuffle 7 --threads 1 --device cpu)

# 1. checkpoint and resume: the same log, bitwise (Dropout's masks included)
"$kiln" train "${common[@]}" --epochs 4 --log full.jsonl --eval eval.npz 2> /dev/null
"$kiln" train "${common[@]}" --epochs 2 --log part.jsonl --eval eval.npz --checkpoint ck 2> /dev/null
"$kiln" train "${common[@]}" --epochs 4 --log part.jsonl --eval eval.npz --resume ck --checkpoint ck --save trained.onnx 2> /dev/null
check "resume: $(grep -c '"step"' full.jsonl) steps, the same log as an uninterrupted run" \
      'cmp -s full.jsonl part.jsonl && [ "$(grep -c "\"step\"" full.jsonl)" = 24 ] && [ "$(grep -c eval_accuracy full.jsonl)" = 4 ]'

# ... and for a CNN, whose convolutions (weights given at run time) take the
# cpu's training paths (oneDNN where it loads)
cnn=(cnn.onnx --data cnn.npz --loss cross_entropy --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 16
     --shuffle 7 --threads 2 --device cpu)
"$kiln" train "${cnn[@]}" --epochs 4 --log cfull.jsonl 2> /dev/null
"$kiln" train "${cnn[@]}" --epochs 2 --log cpart.jsonl --checkpoint cck 2> /dev/null
"$kiln" train "${cnn[@]}" --epochs 4 --log cpart.jsonl --resume cck 2> /dev/null
check "CNN resume: $(grep -c '"step"' cfull.jsonl) steps, the same log as an uninterrupted run" \
      'cmp -s cfull.jsonl cpart.jsonl && [ "$(grep -c "\"step\"" cfull.jsonl)" = 24 ]'

# 2. the saved model in ONNX Runtime and in kiln
venv_py=$("$src/scripts/python-venv.sh" 2> /dev/null | tail -1)
"$kiln" run trained.onnx --input x=x8.npy --output-dir kout > /dev/null 2>&1
if [ -n "$venv_py" ] && [ -x "$src/$venv_py" ]; then
  check "export: ONNX Runtime runs the trained model to kiln's outputs" \
        '"$src/$venv_py" -c "
import numpy as np, onnxruntime as ort
s = ort.InferenceSession(\"trained.onnx\", providers=[\"CPUExecutionProvider\"])
a = s.run(None, {\"x\": np.load(\"x8.npy\")})[0]
b = np.load(\"kout/output_0.npy\")
w0 = np.load(\"ck/weights.npz\")
assert np.abs(a - b).max() <= 1e-5 * max(1, np.abs(a).max()), np.abs(a - b).max()
"'
else
  echo "FAIL export: no bench/.venv with onnxruntime (scripts/python-venv.sh)"
  fail=1
fi

# ... and evaluation ran that inference model: the last epoch's eval loss is the cross-entropy of its outputs
"$kiln" run trained.onnx --input x=x40.npy --output-dir kout40 > /dev/null 2>&1
check "evaluation: BatchNormalization on its running statistics, no Dropout (the saved model's loss)" \
      '"$py" -c "
import json, numpy as np
z = np.load(\"kout40/output_0.npy\").astype(np.float64); t = np.load(\"eval.npz\")[\"target\"]
z = z - z.max(axis=1, keepdims=True); lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
want = -lp[np.arange(len(t)), t].mean()
got = [json.loads(l)[\"eval_loss\"] for l in open(\"full.jsonl\") if \"eval_loss\" in l][-1]
assert abs(got - want) <= 1e-5 * abs(want), (got, want)
"'

# 3. accumulation, clipping, schedules
"$kiln" train "${common[@]}" --epochs 2 --grad-accum 3 --clip-norm 0.5 --log accum.jsonl 2> /dev/null
check "grad-accum 3 with clip-norm: 4 steps per epoch of 6 batches" '[ "$(grep -c "\"step\"" accum.jsonl)" = 4 ]'
"$kiln" train "${common[@]}" --epochs 2 --lr-schedule step:4:0.5 --log step.jsonl 2> /dev/null
check "step schedule: lr 0.05 for steps 1-4, 0.025 for 5-8, 0.0125 for 9-12" \
      '"$py" -c "
import json; lr = [json.loads(l)[\"lr\"] for l in open(\"step.jsonl\")]
assert len(lr) == 12 and all(abs(lr[i] - 0.05 * 0.5 ** (i // 4)) < 1e-7 for i in range(12)), lr"'
"$kiln" train "${common[@]}" --epochs 2 --lr-schedule warmup:5 --log warm.jsonl 2> /dev/null
check "warmup schedule: lr rises linearly over 5 steps" \
      '"$py" -c "
import json; lr = [json.loads(l)[\"lr\"] for l in open(\"warm.jsonl\")]
assert all(abs(lr[i] - 0.05 * min(1, (i + 1) / 5)) < 1e-7 for i in range(12)), lr"'
"$kiln" train "${common[@]}" --epochs 2 --lr-schedule cosine --optimizer adam --log cos.jsonl 2> /dev/null
check "cosine schedule with adam: lr from 0.05 down to near 0 over 12 steps" \
      '"$py" -c "
import json, math; lr = [json.loads(l)[\"lr\"] for l in open(\"cos.jsonl\")]
assert len(lr) == 12 and all(abs(lr[i] - 0.05 * (1 + math.cos(math.pi * i / 12)) / 2) < 1e-7 for i in range(12)), lr"'
"$kiln" train "${common[@]}" --steps 5 --log steps.jsonl 2> /dev/null
check "--steps 5 stops after 5 steps" '[ "$(grep -c "\"step\"" steps.jsonl)" = 5 ]'

# 3b. on Vulkan, where the weights and the optimizer's state stay on the
# device between steps: the trainer reads them back for each evaluation,
# checkpoint and export, and for the last batch of an epoch (a shorter
# one: a plan of its own), and for gradient accumulation's update (its own
# plan). Resume is bitwise there too; the accumulated run's losses match
# the cpu's.
if "$kiln" devices 2> /dev/null | grep -q '^vulkan'; then
  vk=("${common[@]}")
  vk[${#vk[@]} - 1]=vulkan
  "$kiln" train "${vk[@]}" --epochs 4 --log vfull.jsonl --eval eval.npz 2> /dev/null
  "$kiln" train "${vk[@]}" --epochs 2 --log vpart.jsonl --eval eval.npz --checkpoint vck 2> /dev/null
  "$kiln" train "${vk[@]}" --epochs 4 --log vpart.jsonl --eval eval.npz --resume vck --checkpoint vck \
    --save vtrained.onnx 2> /dev/null
  check "vulkan resume: the same log as an uninterrupted run, and within 1e-4 of the cpu's" \
        'cmp -s vfull.jsonl vpart.jsonl && "$py" -c "
import json
a = [json.loads(l) for l in open(\"full.jsonl\")]; b = [json.loads(l) for l in open(\"vfull.jsonl\")]
assert len(a) == len(b) == 28, (len(a), len(b))
for x, y in zip(a, b):
    for k in (\"loss\", \"eval_loss\"):
        if k in x: assert abs(x[k] - y[k]) <= 1e-4 * max(1, abs(x[k])), (k, x, y)
"'
  "$kiln" run vtrained.onnx --input x=x8.npy --output-dir vkout > /dev/null 2>&1
  "$kiln" run trained.onnx --input x=x8.npy --output-dir ckout > /dev/null 2>&1
  check "vulkan export: the trained model's outputs within 1e-3 of the cpu-trained one's" \
        '"$py" -c "
import numpy as np
a = np.load(\"ckout/output_0.npy\"); b = np.load(\"vkout/output_0.npy\")
assert np.abs(a - b).max() <= 1e-3 * max(1, np.abs(a).max()), np.abs(a - b).max()
"'
  "$kiln" train "${vk[@]}" --epochs 2 --grad-accum 3 --clip-norm 0.5 --log vaccum.jsonl 2> /dev/null
  check "vulkan grad-accum 3: the cpu's losses within 1e-4" \
        '"$py" -c "
import json
a = [json.loads(l)[\"loss\"] for l in open(\"accum.jsonl\")]; b = [json.loads(l)[\"loss\"] for l in open(\"vaccum.jsonl\")]
assert len(a) == len(b) == 4 and all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)), (a, b)
"'
else
  echo "SKIP vulkan: no Vulkan device"
fi

# 4. bad data: an error naming the problem, before any step
bad() { # name, data file, expected message part
  local out rc want=$3
  rm -f bad.jsonl
  out=$("$kiln" train mlp.onnx --data "$2" --loss cross_entropy --log bad.jsonl 2>&1)
  rc=$?
  check "bad data ($1): '$(echo "$out" | tail -1 | cut -c1-120)'" \
        '[ $rc -ne 0 ] && echo "$out" | grep -q -- "$want" && [ ! -s bad.jsonl ]'
}
bad "missing input" no_x.npz "no array 'x'"
bad "missing targets" no_target.npz "no array 'target'"
bad "wrong dtype" f64.npz "is f64, the model's input is f32"
bad "sample counts" counts.npz "samples"
bad "class out of range" class.npz "is class 5, expected 0..4"
exit $fail
