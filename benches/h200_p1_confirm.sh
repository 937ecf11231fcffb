#!/usr/bin/env bash
# Owed from the seventh session (2026-12-06), on an H100 or H200 in one command: main's
# first pass as committed (new: c39e289 or later, bf16 / f16 on the first Gram table and
# f32 on the shared column, a file that ran on lavapipe but was not timed whole)
# against 047feb8 (old), alternating twice, bf16 and f32 at B = 1, T = 8192 and 2048,
# bf16 at B = 4; fla 0.6.0's chunk kernel (CUDA graphs) in the same command; then new's
# chunk, record lib and rollback tests on the matrix units. Within BUDGET_S (default
# 420 s).
#
# Expects .gl/ and .dev/s11/: old(.gz), new(.gz) (stripped `deltatape` builds),
# t/{chunk,lib,rollback}(.gz) (new's stripped test executables), fla/
# (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s11", ".gl"].
set -u
E=.dev/s11 DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, b, tests
export DELTATAPE_BIN=$E/new
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for round in 1 2; do
    for bin in old new; do
      b $bin --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5
      b $bin --batches 4 --steps 8192 --dtypes bf16 --runs 3
    done
  done
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
    timeout 120 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -8
  tests "chunk 100" "lib 70 record" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/confirm.txt"
