#!/usr/bin/env bash
# The first pass on vector units with W and U by forward substitution down each column
# of the gated system (no inverse, no merges: `new`) against the commit before (`old`,
# 4a54764: A0 by blocks and merges, then W and U as products), rounds alternating,
# beside record; `unrolled` is `new` with the substitution unrolled whole (a probe
# build's DELTATAPE_ROOT_chunk_prep, not in the crate: lavapipe took minutes to compile
# it). First the new build's tests on the device: the lib's passes on vector units
# against their twin, the chunk tests' fast path on both forms, the rollback's long
# drafts. Carry [".dev/p18", ".gl"]; within BUDGET_S (default 420 s).
set -u
E=.dev/p18 DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p18)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "t/lib 60 portable" "t/chunk 150 gpu_fast_path" "t/rollback 60 long_drafts"
  for round in 1 2; do
    c old old $vec -- "${cells[@]}"
    c new new $vec -- "${cells[@]}"
  done
  c unrolled probe $vec DELTATAPE_ROOT_chunk_prep=$E/w/unrolled.wgsl -- --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  stats old vkstats chunk_prep; mv "$OUT/chunk_prep.spv.hex" "$OUT/old_chunk_prep.spv.hex"
  DELTATAPE_ROOT_chunk_prep=$E/w/unrolled.wgsl "$E/probe" msl chunk_prep --lang spirv --dtype bf16 > "$OUT/unrolled_chunk_prep.spv.hex"
  stats new vkstats chunk_prep
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/prep-subst.txt"
