#!/usr/bin/env bash
# The passes on vector units with fewer barriers (branch `barriers`), each commit's
# build against 5d33efe's kernels (`new`, main's), rounds alternating:
#   walk  afd809f  chunk_walk's stage in two halves: 4 barriers a chunk for 7
#   out   cb16acc  + chunk_out's the same: 6 a workgroup for 12
#   prep  411666b  + chunk_prep's W rows stored from registers: 8 fewer in the solve
#   prepraw 5915488 (branch barriers-raw) + the first pass's k and v left packed until
#           their quad is used, as on branch rhs-raw
#   ks    barriers-ks (its head) prep's + the walk's W product split over key
#         halves by invocation pairs, added by a subgroup shuffle
# then `rawnew` (branch rhs-raw: the first pass's k and v left packed until used), the
# walk at 16 rows, and probe roots through `probe` (5d33efe with DELTATAPE_ROOT_<root>;
# not in the crate): dbuf2 (the two halves, each part's tiles loaded two parts ahead
# instead of one), noload / raw / pf4 (the first pass's right-hand side loads left
# out, packed, four quads ahead). The tests of prep's build on the
# device: the passes against their twin between the two rounds, the rest after.
# Carry [".dev/p22", ".gl"]; within BUDGET_S (default 480).
set -u
E=.dev/p22 DEFAULT_BUDGET_S=480
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p22)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for b in new walk out prep prepraw ks; do c $b $b $vec -- "${cells[@]}"; done
  tests "t/lib 60 portable"
  for b in new walk out prep prepraw ks; do c $b $b $vec -- "${cells[@]}"; done
  tests "t/chunk 150" "t/rollback 60 long_drafts" "t/varlen 90" "t/layer 90"
  c rawnew rawnew $vec -- "${cells[@]}"
  c dbuf2 probe $vec DELTATAPE_ROOT_chunk_walk=$E/w/dbuf2.wgsl -- "${cells[@]}"
  c walk16 walk $vec DELTATAPE_CHUNK_WALK_ROWS=16 -- "${cells[@]}"
  c new16 new $vec DELTATAPE_CHUNK_WALK_ROWS=16 -- "${cells[@]}"
  c new2k new $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  c prep2k prep $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c noload probe $vec DELTATAPE_ROOT_chunk_prep=$E/w/noload.wgsl -- "${cells[@]}"
  c raw probe $vec DELTATAPE_ROOT_chunk_prep=$E/w/raw.wgsl -- --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  c pf4 probe $vec DELTATAPE_ROOT_chunk_prep=$E/w/pf4.wgsl -- "${cells[@]}"
  stats new vkstats chunk_walk chunk_out chunk_prep
  for k in chunk_walk chunk_out chunk_prep; do mv "$OUT/$k.spv.hex" "$OUT/new_$k.spv.hex"; done
  stats prep vkstats chunk_walk chunk_out chunk_prep
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/barriers.txt"
