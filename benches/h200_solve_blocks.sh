#!/usr/bin/env bash
# The solve's merges by 4 x 4 blocks an invocation (2026-12-07, thirteenth session; the
# closing run): benches/results/h100-2026-12-07-solve-unrolled.txt showed the first
# pass bound by the instructions it issues, the merges 221 of its 1040 us at bf16
# B = 1, T = 8192 with 2 x 2 blocks. new3 is this build, new is e2ef3d8 (2 x 2 blocks;
# read only its chunk_prep: its walk and output pass are the f32 staging since taken
# back), old is 98c6813 (the block-row solve). First new3's tests: the fast path on
# both forms (the matrix-unit path where the adapter has it), the portable passes, the
# lib's passes on vector units, record_layer's split form and the rollback's long
# drafts through them; then new3 against record in every cell, the matrix-unit path.
# Carry [".dev/new3", ".dev/new", ".dev/old", ".gl"]; within BUDGET_S (default 400 s).
set -u
E=.dev DEFAULT_BUDGET_S=400
. benches/device_env.sh # left, tests, c (E is now the absolute .dev)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
one=(--ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "new3/t/chunk 150 gpu_" "new3/t/lib 60 portable" "new3/t/layer 60 chunked" \
    "new3/t/rollback 90 long_drafts"
  for round in 1 2; do
    c new3 new3/bin $vec -- "${one[@]}"
    c new new/bin $vec -- "${one[@]}"
    c old old/bin $vec -- "${one[@]}"
  done
  c new3 new3/bin $vec -- --ops record_chunked,record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c coop-new3 new3/bin -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c exact-new3 new3/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  c exact-old old/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  "$E/new3/bin" msl chunk_prep --lang spirv --dtype bf16 > "$OUT/chunk_prep.spv.hex" 2>/dev/null
  [ -x "$E/new/vkstats" ] && timeout 60 "$E/new/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/solve-blocks.txt"
