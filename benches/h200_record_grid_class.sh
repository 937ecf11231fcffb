#!/usr/bin/env bash
# Record's small-grid class against its large-grid class and 8 lanes a row (2026-12-07):
# in h100-2026-12-07-groups.txt, 8 lanes at B = 8 (which makes the grid a large one:
# 2 rows an invocation, the scaled state) took bf16 record 7-8% under the table's
# small-grid class with 4 lanes. Which part did it, and from which B: at B = 1, 2, 4, 8,
# 16, T = 16, 256 and 2048, bf16 and f32, twice alternating,
#   small4  the table's class (B <= 8 at Qwen3-Next's heads: 4 lanes, 1 row, unscaled)
#   large4  4 lanes with the large-grid class's 2 rows an invocation and scaled state
#   lanes8  8 lanes, the class the table then picks
#   small8  8 lanes with the small-grid class's 1 row and unscaled state
# and at B = 64 and 256 (large grids), T = 1, 4, 16, lanes 4 (the table's) against 8.
# Every call sets DELTATAPE_RECORD_SPS=1 (the .dev/s14 build defaults to 4 on small
# grids; main to 1). Carry [".dev/s14", ".gl"]; within BUDGET_S (default 300 s).
set -u
E=${GROUPS_E:-.dev/s14} DEFAULT_BUDGET_S=300
. benches/device_env.sh # left
c() { # NAME ENV... -- BENCH-ARGS...
  local name=$1; shift; local envs=(DELTATAPE_RECORD_SPS=1)
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 20 ] && { echo "skipped $name $*"; return; }
  timeout 90 env "${envs[@]}" "$E/bin" bench --dims 16,32,128,128 --runs 10 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
small=(--ops record --batches 1,2,4,8,16 --steps 16,256,2048 --dtypes bf16,f32)
large=(--ops record --batches 64,256 --steps 1,4,16 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    c small4 -- "${small[@]}"
    c large4 DELTATAPE_RECORD_RPT=2 DELTATAPE_RECORD_SCALED=1 -- "${small[@]}"
    c lanes8 DELTATAPE_RECORD_LANES=8 -- "${small[@]}"
    c small8 DELTATAPE_RECORD_LANES=8 DELTATAPE_RECORD_RPT=1 DELTATAPE_RECORD_SCALED=0 -- "${small[@]}"
  done
  for round in 1 2; do
    c large-lanes4 -- "${large[@]}"
    c large-lanes8 DELTATAPE_RECORD_LANES=8 -- "${large[@]}"
  done
  # The driver's statistics of record's kernel at one step a reduction and at 2 and 4
  # (spv/: `deltatape msl record --lang spirv`, the grouped ones from the .dev/s14 build).
  [ -x "$E/vkstats" ] && timeout 60 "$E/vkstats" $E/spv/*.spv.hex 2>&1 | sed "s|$E/spv/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/grid.txt"
