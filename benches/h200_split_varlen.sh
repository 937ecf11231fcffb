#!/usr/bin/env bash
# The split form over packed sequences (issues 47 and 49), in one command: the committed
# binary's tests/layer.rs, tests/varlen.rs, tests/rollback.rs and tests/chunk.rs on the
# NVIDIA driver; `deltatape bench` of record_varlen and record_layer_varlen in its split
# (DELTATAPE_RECORD_SPLIT=1: the packed prologue, then record_varlen) and fused (=0)
# forms on the 8 prompts of shared/bench/fla_varlen_bench.py (9899 tokens), bf16 and f32;
# then that script (fla 0.6.0's varlen chunk call, CUDA graphs) beside it. Expects
# .dev/closing.tgz (d: the deltatape binary; t/: the test executables),
# .dev/fla_varlen_bench.py and the fla wheels, and .gl/ (shared/gpu/README.md). Writes
# logs under $OUT (three files).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
F=/tmp/closing; mkdir -p $F; tar xzf .dev/closing.tgz -C $F; export DELTATAPE_BIN=$F/d
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $F/d info 2>&1 | head -3; } > "$OUT/tests.txt"
for n in layer varlen rollback chunk; do
  timeout 120 $F/t/$n-* > /tmp/test-$n.log 2>&1; echo "$n rc $?" >> "$OUT/tests.txt"
  grep -E "^test |^test result|cooperative-matrix path on" /tmp/test-$n.log | sort | uniq -c >> "$OUT/tests.txt"
  grep -A4 panicked /tmp/test-$n.log >> "$OUT/tests.txt"
done
grep -E "rc|result|panicked" "$OUT/tests.txt"
V="--ops record_varlen,record_layer_varlen --dtypes bf16,f32 --runs 10 --warmup 2"
{ echo "== split (DELTATAPE_RECORD_SPLIT=1)"; DELTATAPE_RECORD_SPLIT=1 timeout 90 $F/d bench $V 2>/dev/null; echo "rc $?"
  echo "== fused (DELTATAPE_RECORD_SPLIT=0)"; DELTATAPE_RECORD_SPLIT=0 timeout 90 $F/d bench $V 2>/dev/null; echo "rc $?"; } > "$OUT/bench.txt"
grep -E "^(==|rc|record)" "$OUT/bench.txt"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl 2>&1 | tail -2
PYTHONPATH=/tmp/site timeout 120 python3 .dev/fla_varlen_bench.py > "$OUT/fla.txt" 2>&1
echo "fla rc $?"; grep RESULT "$OUT/fla.txt"
