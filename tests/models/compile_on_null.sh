#!/bin/sh
# compile_on_null.sh KILN MODELS_DIR
# The null device runs the whole compiler and executes nothing: every test
# model (the big ones included) must prepare on it — claimed, fused,
# lowered, every kernel rendered as C, memory planned — with no node left
# to ref, and `kiln info --device null` must say how many kernels it
# rendered. Exit 0 pass, 1 fail, 2 usage or missing models.
set -u
KILN=${1:?usage: $0 KILN MODELS_DIR}
DIR=${2:?usage: $0 KILN MODELS_DIR}
fail=0
n=0
for m in mlp small_cnn small_cnn_dyn mobilenet_v2 resnet50 transformer_encoder bert_encoder big_mlp; do
  f=$DIR/$m.onnx
  if [ ! -f "$f" ]; then echo "FAIL: $f is missing (export the models first)"; exit 2; fi
  out=$("$KILN" info "$f" --device null 2>&1)
  rendered=$(printf '%s\n' "$out" | sed -n 's/^null: \([0-9][0-9]*\) kernels rendered.*/\1/p')
  on_ref=$(printf '%s\n' "$out" | sed -n 's/.*, \([0-9][0-9]*\) nodes on ref.*/\1/p')
  if [ -z "$rendered" ] || [ -z "$on_ref" ]; then
    echo "FAIL: $m did not compile on null:"; printf '%s\n' "$out" | sed 's/^/  /'; fail=1; continue
  fi
  if [ "$on_ref" -ne 0 ]; then
    echo "FAIL: $m: $on_ref nodes left to ref on null:"; printf '%s\n' "$out" | sed -n '/fell back to ref:/,$p' | sed 's/^/  /'
    fail=1
  fi
  echo "$m: $(printf '%s\n' "$out" | grep '^plan:' | sed 's/^plan: //')"
  n=$((n + 1))
done
[ $fail -eq 0 ] && echo "PASS: $n models compiled on null"
exit $fail
