#!/usr/bin/env bash
# The fast path's walk and output pass on vector units (2026-12-07, issue 49's first
# bricks): chunk_walk.wgsl and chunk_out.wgsl, register-tiled f32 products of the first
# pass's f16 tiles, against the passes on cooperative matrices and record, in one
# command. Before them the twins were lane loops over the tiles in memory (chunk_walk
# 2381 us, chunk_out 1919 at bf16 B = 1, T = 8192 on an H100, PERFORMANCE.md); the
# first pass (chunk_prep) is still its lane-loop twin. First the build's GPU tests of
# the fast path (tests/chunk.rs `gpu_fast_path`: both forms on this adapter; the lib's
# twin test), then at bf16 and f32, B = 1 and 4, T = 2048 and 8192:
#   coop     --fast-f16: chunk_prep_coop, chunk_walk_coop, chunk_out_coop; and record
#   vec16    DELTATAPE_CHUNK_PRECISION=fast-f16 (no consent to cooperative matrices):
#            chunk_prep, chunk_walk at 16 value rows, chunk_out
#   vec32    the same with the walk at 32 rows
# each row with its passes timed alone; then the driver's statistics (registers) of
# the walk and the output pass. Carry [".dev/s17", ".gl"] (or the build elsewhere, as
# VEC_E); within BUDGET_S (default 330 s).
set -u
E=${VEC_E:-.dev/s17} DEFAULT_BUDGET_S=330
. benches/device_env.sh # left, tests
c() { # NAME ENV... -- BENCH-ARGS...
  local name=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 30 ] && { echo "skipped $name $*"; return; }
  timeout 100 env "${envs[@]}" "$E/bin" bench --dims 16,32,128,128 --runs 5 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
cells=(--batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "chunk 90 gpu_fast_path" "lib 30 portable_fast"
  c coop -- --fast-f16 --ops record_chunked,record "${cells[@]}"
  c vec16 DELTATAPE_CHUNK_PRECISION=fast-f16 -- --ops record_chunked "${cells[@]}"
  c vec32 DELTATAPE_CHUNK_PRECISION=fast-f16 DELTATAPE_CHUNK_WALK_ROWS=32 -- --ops record_chunked "${cells[@]}"
  for k in chunk_walk chunk_out; do
    "$E/bin" msl $k --lang spirv > "$OUT/$k.spv.hex" 2>/dev/null
    "$E/bin" msl $k --lang spirv --dtype bf16 > "$OUT/$k.bf16.spv.hex" 2>/dev/null
  done
  [ -x "$E/vkstats" ] && timeout 60 "$E/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/vector.txt"
