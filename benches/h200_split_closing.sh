#!/usr/bin/env bash
# The closing device run of the split form (issues 47 and 49), in one command: the
# committed binary's tests/layer.rs, tests/chunk.rs and tests/rollback.rs on the NVIDIA
# driver (the cooperative path, both record_layer forms, their shared scratch); the
# 36-layer rounds from raw inputs with the default form and the fused one, at once and
# deferred, beside the plain rounds; a few decode cells of record and record_layer.
# Expects .dev/closing.tgz (d: the deltatape binary; t/: the test executables) and .gl/
# (shared/gpu/README.md). Writes logs under $OUT (four files).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
F=/tmp/closing; mkdir -p $F; tar xzf .dev/closing.tgz -C $F; export DELTATAPE_BIN=$F/d
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $F/d info 2>&1 | head -3; } > "$OUT/tests.txt"
for n in layer chunk rollback; do
  timeout 120 $F/t/$n-* > /tmp/test-$n.log 2>&1; echo "$n rc $?" >> "$OUT/tests.txt"
  grep -E "^test |^test result|cooperative-matrix path on" /tmp/test-$n.log | sort | uniq -c >> "$OUT/tests.txt"
  grep -A4 panicked /tmp/test-$n.log >> "$OUT/tests.txt"
done
grep -E "rc|result|panicked" "$OUT/tests.txt"
R="--modes single --batches 1,8,64 --steps 4,16 --rounds 5"
{ echo "== round"; timeout 40 $F/d round $R 2>/dev/null
  echo "== round --raw (default: split)"; timeout 40 $F/d round --raw $R 2>/dev/null
  echo "== round --raw (fused)"; DELTATAPE_RECORD_SPLIT=0 timeout 40 $F/d round --raw $R 2>/dev/null
  echo "== round --deferred"; timeout 40 $F/d round --deferred $R 2>/dev/null
  echo "== round --raw --deferred (default: split)"; timeout 40 $F/d round --raw --deferred $R 2>/dev/null
  echo "== round --raw --deferred (fused)"; DELTATAPE_RECORD_SPLIT=0 timeout 40 $F/d round --raw --deferred $R 2>/dev/null; } > "$OUT/round.txt"
echo "round rc $?"
timeout 90 $F/d bench --ops record,record_layer --batches 1,8,256 --steps 1,16 --dtypes bf16 --runs 10 > "$OUT/bench.txt" 2>/dev/null
echo "bench rc $?"
