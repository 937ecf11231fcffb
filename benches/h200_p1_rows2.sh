#!/usr/bin/env bash
# The sixth session's second call (2026-12-06) on an H100 or H200, in one command: the
# first pass with L0 into A and Gam's mask on A four values at a time too, and (G_end
# K)^T's block at a row stride of 66 (new2), the same at the stride of 72 (hs72), against
# 8378670 (new), alternating; then new2's chunk, record lib, varlen, layer and rollback
# tests and fla 0.6.0's chunk kernel (CUDA graphs) while time is left. Within BUDGET_S
# (default 480 s).
#
# Expects .gl/ and .dev/s8/: new(.gz), new2(.gz), hs72(.gz) (`deltatape` builds),
# t/{chunk,lib,varlen,layer,rollback}(.gz) (new2's stripped test executables), fla/
# (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s8", ".gl"].
set -u
E=.dev/s8 DEFAULT_BUDGET_S=480
. benches/device_env.sh # left, b, tests
N=$E/new2; export DELTATAPE_BIN=$N
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for r in 1 2; do
    for bin in new new2 hs72; do b $bin --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5; done
    for bin in new new2 hs72; do b $bin --batches 4 --steps 8192 --dtypes bf16 --runs 3; done
  done
  tests "chunk 100"
  if [ "$(left)" -gt 90 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
  fi
  tests "lib 70 record" "varlen 50" "layer 60" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/p1.txt"
