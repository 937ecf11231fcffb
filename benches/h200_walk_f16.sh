#!/usr/bin/env bash
# The closing run of the fourteenth session (2026-12-07): the walk on vector units with
# s16 and f16(delta) in workgroup memory as f16 (benches/h200_lds.sh measured it), at
# the value rows the crate now takes by default on vector units (32; 16 on matrix
# units), against the commit before (`old`), rounds alternating, beside record. First
# the final build's tests on the device: the fast path on both forms (chunk), the lib's
# passes on vector units against their twin, the rollback's long drafts.
# Carry [".dev/p17", ".gl"]; within BUDGET_S (default 300 s).
set -u
E=.dev/p17 DEFAULT_BUDGET_S=300
. benches/device_env.sh # left, tests, c (E is now the absolute .dev/p17)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "t/chunk 150 gpu_fast_path" "t/lib 60 portable" "t/rollback 60 long_drafts"
  for round in 1 2; do
    c old old $vec -- "${cells[@]}"
    c new new $vec -- "${cells[@]}"
  done
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c coop new -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/walk-f16.txt"
