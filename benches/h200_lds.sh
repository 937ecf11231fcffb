#!/usr/bin/env bash
# The passes on vector units with fewer loads from workgroup memory (2026-12-07,
# fourteenth session). benches/h200_convert.sh found them bound by those loads, not by
# their f16 conversions: the walk's f16 tiles staged in f32 (twice the loads) took it
# 1222 -> 1590 us, the conversions left out 1171. The new build (`new`): the walk keeps
# s16 and f16(delta) in workgroup memory as f16, eight a load (they were f32, four),
# `sw`'s rows a word later every XR rows (the eight rows a quarter subgroup reads fell
# in four banks' groups twice); the output pass pads B's tiles by two words (the eight
# column octets a quarter subgroup reads fell in two groups of banks); the first pass
# stages k and v for W's and U's products in f16 (as the matrix units take them), eight
# a load. Against the commit before (`old`), rounds alternating, beside record and the
# walk at 32 rows.
# First the new build's tests on the device.
# Carry [".dev/p16", ".gl"]; within BUDGET_S (default 360 s).
set -u
E=.dev/p16 DEFAULT_BUDGET_S=360
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p16)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "t/chunk 150 gpu_fast_path" "t/lib 60 portable" "t/rollback 60 long_drafts"
  for round in 1 2; do
    c old old $vec -- "${cells[@]}"
    c new new $vec -- "${cells[@]}"
  done
  c new32 new $vec DELTATAPE_CHUNK_WALK_ROWS=32 -- --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c new new $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  stats new vkstats chunk_prep chunk_walk chunk_out
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/lds.txt"
