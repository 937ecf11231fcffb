#!/usr/bin/env bash
# One command for record's small-grid classes (2026-12-07), when a device call is all a
# session gets: record's steps a reduction (DELTATAPE_RECORD_SPS 1 / 4 / 8 / 2) at B = 1 and
# 8, T = 16, 256 and 2048, bf16 and f32, twice alternating; at T = 8192 beside the fast path; then the lanes a row (8, 16)
# against SPS 1 / 4 / 8; fla 0.6.0's fused recurrent kernel beside; record_layer and
# fold_record at SPS 1 and 4; then the grouped form's tests on the device (the .dev/s14
# build runs it by default). Expects what benches/h200_record_groups.sh expects (carry
# [".dev/s14", ".gl"]); within BUDGET_S (default 540 s).
set -u
E=${GROUPS_E:-.dev/s14} DEFAULT_BUDGET_S=540
. benches/device_env.sh # left, tests
g() { # LANES SPS BENCH-ARGS... (LANES 0: the table's)
  local lanes=$1 sps=$2; shift 2
  [ "$(left)" -lt "${RESERVE_S:-60}" ] && { echo "skipped lanes=$lanes sps=$sps $*"; return; }
  local envs=(DELTATAPE_RECORD_SPS=$sps)
  [ "$lanes" != 0 ] && envs+=(DELTATAPE_RECORD_LANES=$lanes)
  timeout 90 env "${envs[@]}" "$E/bin" bench --dims 16,32,128,128 --runs 10 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^(record|fold)|rror" | sed "s/^/lanes=$lanes sps=$sps /"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  RESERVE_S=300
  for round in 1 2; do for sps in 1 4 8 2; do
    g 0 $sps --ops record --batches 1,8 --steps 16,256,2048 --dtypes bf16,f32
  done; done
  RESERVE_S=240
  for sps in 1 4 8; do g 0 $sps --ops record --batches 1 --steps 8192 --dtypes bf16,f32; done
  timeout 60 "$E/bin" bench --fast-f16 --ops record_chunked --batches 1 --steps 2048,8192 \
    --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "^record|rror"
  RESERVE_S=200
  for lanes in 8 16; do for sps in 1 4 8; do
    g $lanes $sps --ops record --batches 1,8 --steps 16,256,2048 --dtypes bf16
  done; done
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout 70 python3 $E/fla/fla_bench.py 2>&1 \
    | grep -E "RESULT fla_fused_recurrent .* B=(1|8) |Error|error" | head -20
  RESERVE_S=130
  for sps in 1 4; do g 0 $sps --ops record_layer,fold_record --batches 1,8 --steps 4,16 --dtypes bf16; done
  tests "gpu_kernels 60" "rollback 60" "layer 60" "varlen 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/groups.txt"
