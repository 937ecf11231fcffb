#!/usr/bin/env bash
# Issue 47 / 49's device run for record_layer's two forms, in one command: tests/layer.rs
# and tests/chunk.rs on the NVIDIA driver; `deltatape bench` of record, record_layer
# split (DELTATAPE_RECORD_SPLIT=1: the prologue pass, then record), the prologue alone
# and record_layer fused (=0) over B 1, 8, 64, 256 and T 1, 4, 8, 16, bf16 and f32; the
# prefill cells (B 1 and 4, T 2048 and 8192) with the fast path on, where the split form's
# record takes the chunked form; the 36-layer rounds (plain, --raw in both forms); then
# fla 0.6.0's conv + fused recurrence chain (shared/bench/fla_layer_bench.py, CUDA graphs)
# beside it. Expects .dev/split.tgz (d: the deltatape binary; t/: the layer-* and chunk-*
# test executables), .dev/fla_layer_bench.py and the fla wheels, and .gl/ the Vulkan loader
# (shared/gpu/README.md). Writes logs under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
F=/tmp/split; mkdir -p $F; tar xzf .dev/split.tgz -C $F; export DELTATAPE_BIN=$F/d
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $F/d info 2>&1 | head -3; } > "$OUT/tests.txt"
for n in layer chunk; do
  timeout 100 $F/t/$n-* > /tmp/test-$n.log 2>&1; echo "$n rc $?" >> "$OUT/tests.txt"
  grep -E "^test |^test result|cooperative-matrix path on" /tmp/test-$n.log | sort | uniq -c >> "$OUT/tests.txt"
  grep -A4 panicked /tmp/test-$n.log >> "$OUT/tests.txt"
done
cat "$OUT/tests.txt"
GRID="--batches 1,8,64,256 --steps 1,4,8,16 --dtypes bf16,f32 --runs 10"
PRE="--fast-f16 --batches 1,4 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2"
{ echo "== split: record, record_layer (DELTATAPE_RECORD_SPLIT=1), prologue"
  DELTATAPE_RECORD_SPLIT=1 timeout 150 $F/d bench --ops record,record_layer,prologue $GRID 2>/dev/null; echo "rc $?"
  echo "== fused: record_layer (DELTATAPE_RECORD_SPLIT=0)"
  DELTATAPE_RECORD_SPLIT=0 timeout 90 $F/d bench --ops record_layer $GRID 2>/dev/null; echo "rc $?"
  echo "== prefill split (fast path on)"
  DELTATAPE_RECORD_SPLIT=1 timeout 60 $F/d bench --ops record,record_layer,prologue $PRE 2>/dev/null; echo "rc $?"
  echo "== prefill fused (fast path on)"
  DELTATAPE_RECORD_SPLIT=0 timeout 60 $F/d bench --ops record_layer $PRE 2>/dev/null; echo "rc $?"
} > "$OUT/bench.txt"
grep -E "^(==|rc)" "$OUT/bench.txt"
R="--modes single --batches 1,8,64 --steps 4,16 --rounds 5"
{ echo "== round"; timeout 40 $F/d round $R 2>/dev/null
  echo "== round --raw (split)"; DELTATAPE_RECORD_SPLIT=1 timeout 40 $F/d round --raw $R 2>/dev/null
  echo "== round --raw (fused)"; DELTATAPE_RECORD_SPLIT=0 timeout 40 $F/d round --raw $R 2>/dev/null; } > "$OUT/round.txt"
echo "round rc $?"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl 2>&1 | tail -2
PYTHONPATH=/tmp/site timeout 150 python3 .dev/fla_layer_bench.py > "$OUT/fla.txt" 2>&1
echo "fla rc $?"; grep -c RESULT "$OUT/fla.txt"
