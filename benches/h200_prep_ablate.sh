#!/usr/bin/env bash
# Where the first pass on vector units spends its time (2026-12-07, twelfth session):
# chunk_prep.wgsl took 1934 us at bf16 B = 1, T = 8192 on an H100 (1485 in f32), about
# 9% of the f32 peak its multiply-adds need (h100-2026-12-07-prep-vector.txt). Builds of
# it with one part left out (wrong results, timing only), each timed as the fast path's
# pass on vector units at B = 1, T = 8192, bf16 and f32, beside the whole pass
# (.dev/s18/bin_u):
#   noU      U's products skipped          noWU     W's and U's
#   noGram   the Gram products' sums       noSolve  the solve
#   noLoad   W's and U's operands made up, not loaded (their sums kept)
#   jqRoll   W's and U's products unrolled over 4 steps, not 16
#   xRoll    the Gram products over one key quad at a time, not four
# Carry [".dev/s19", ".dev/s18", ".gl"]; within BUDGET_S (default 300 s).
set -u
E=.dev DEFAULT_BUDGET_S=300
. benches/device_env.sh # left (E is now the absolute .dev)
c() { # NAME BIN
  [ "$(left)" -lt 25 ] && { echo "skipped $1"; return; }
  timeout 60 env DELTATAPE_CHUNK_PRECISION=fast-f16 "$E/$2" bench --dims 16,32,128,128 \
    --runs 5 --warmup 2 --copy-mib 64 --ops record_chunked --batches 1 --steps 8192 \
    --dtypes bf16,f32 2>&1 | grep -E "chunk_prep |rror" | sed "s/^/$1 /"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    c base s18/bin_u
    for v in noU noWU noGram noSolve noLoad jqRoll xRoll; do c $v s19/$v; done
  done
  for v in base:s18/bin_u jqRoll:s19/jqRoll xRoll:s19/xRoll; do
    "$E/${v#*:}" msl chunk_prep --lang spirv --dtype bf16 > "$OUT/${v%%:*}.spv.hex" 2>/dev/null
  done
  [ -x "$E/s19/vkstats" ] && timeout 60 "$E/s19/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/prep-ablate.txt"
