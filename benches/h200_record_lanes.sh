#!/usr/bin/env bash
# Record's lanes a state row against its steps a reduction (GdnClass::steps_per_sum), on an
# H100 or H200 in one command: at B = 1 the grid holds 4096 rows, a few percent of what
# the GPU keeps resident, so more lanes a row (8, 16) give more invocations, and the
# longer reductions they bring are what several steps a reduction share. bf16 and f32,
# B = 1 and 8, T = 16, 256 and 2048, lanes 4 / 8 / 16 against SPS 1 / 4 / 8, twice in
# alternating order. Expects what benches/h200_record_groups.sh expects (carry
# [".dev/s14", ".gl"]); within BUDGET_S (default 400 s).
set -u
E=${GROUPS_E:-.dev/s14} DEFAULT_BUDGET_S=400
. benches/device_env.sh # left
g() { # LANES SPS BENCH-ARGS...
  local lanes=$1 sps=$2; shift 2
  [ "$(left)" -lt "${RESERVE_S:-30}" ] && { echo "skipped lanes=$lanes sps=$sps $*"; return; }
  DELTATAPE_RECORD_LANES=$lanes DELTATAPE_RECORD_SPS=$sps timeout 90 "$E/bin" bench \
    --dims 16,32,128,128 --runs 10 --warmup 2 --copy-mib 64 "$@" 2>&1 \
    | grep -E "^record|rror" | sed "s/^/lanes=$lanes sps=$sps /"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    for lanes in 4 8 16; do for sps in 1 4 8; do
      g $lanes $sps --ops record --batches 1,8 --steps 16,256,2048 --dtypes bf16,f32
    done; done
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/lanes.txt"
