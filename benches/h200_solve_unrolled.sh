#!/usr/bin/env bash
# The solve's merges with constant trip counts (2026-12-07, thirteenth session): each
# merge product over all w terms, sixteen unrolled at a time (the terms past the
# triangle masked by T's zeros), where they looped from the first nonzero term (the
# first run, benches/results/h100-2026-12-07-solve-stage.txt: first pass 1065 -> 1031 us,
# and 775 without its solve). new2 is this build; new is e2ef3d8 (the merges' dynamic
# loops; its walk and output pass are the f32 staging since taken back: read only its
# chunk_prep), old is 98c6813 (the block-row solve), nosolve and diagonly are probes
# (e2ef3d8's first pass without its solve, new2's without its merges: wrong values,
# their times what is left). First new2's tests: the fast path on both forms, the
# portable passes, the lib's passes on vector units, record_layer's split form and the
# rollback's long drafts through them; then new2 against record in every cell (the
# closing table), and the matrix-unit path's time.
# Carry [".dev/new2", ".dev/new", ".dev/old", ".dev/nosolve", ".dev/diagonly", ".gl"];
# within BUDGET_S (default 400 s).
set -u
E=.dev DEFAULT_BUDGET_S=400
. benches/device_env.sh # left, tests, c (E is now the absolute .dev)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
one=(--ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "new2/t/chunk 150 gpu_" "new2/t/lib 60 portable" "new2/t/layer 60 chunked" \
    "new2/t/rollback 90 long_drafts"
  for round in 1 2; do
    c new2 new2/bin $vec -- "${one[@]}"
    c new new/bin $vec -- "${one[@]}"
    c old old/bin $vec -- "${one[@]}"
    c diagonly diagonly/bin $vec -- "${one[@]}"
    c nosolve nosolve/bin $vec -- "${one[@]}"
  done
  c new2 new2/bin $vec -- --ops record_chunked,record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c coop-new2 new2/bin -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c exact-new2 new2/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  c exact-old old/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  "$E/new2/bin" msl chunk_prep --lang spirv --dtype bf16 > "$OUT/chunk_prep.spv.hex" 2>/dev/null
  [ -x "$E/new/vkstats" ] && timeout 60 "$E/new/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/solve-unrolled.txt"
