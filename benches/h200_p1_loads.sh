#!/usr/bin/env bash
# The sixth session's third call (2026-12-06) on an H100 or H200, in one command: the
# first pass's two-part products with each tile loaded once (new3: phase 6's A in two
# parts against one B tile, the merges' and f32's Gram products) against ca8fbc8
# (new2), alternating, with new3's chunk tests between the two rounds; then its record
# lib tests, fla 0.6.0's chunk kernel (CUDA graphs) and the varlen, layer and rollback
# tests while time is left. Within BUDGET_S
# (default 420 s).
#
# Expects .gl/ and .dev/s9/: new2(.gz), new3(.gz) (`deltatape` builds),
# t/{chunk,lib,varlen,layer,rollback}(.gz) (new3's stripped test executables), fla/
# (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s9", ".gl"].
set -u
E=.dev/s9 DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, b, tests
N=$E/new3; export DELTATAPE_BIN=$N
{ nvidia-smi --query-gpu=name --format=csv,noheader
  round() {
    for bin in new2 new3; do b $bin --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5; done
    for bin in new2 new3; do b $bin --batches 4 --steps 8192 --dtypes bf16 --runs 3; done
  }
  round
  tests "chunk 100"
  round
  tests "lib 70 record"
  if [ "$(left)" -gt 90 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
    CASES="1:8192" DTYPES=float32 PYTHONPATH=/tmp/site \
      timeout 60 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -4
  fi
  tests "varlen 50" "layer 60" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/p1.txt"
