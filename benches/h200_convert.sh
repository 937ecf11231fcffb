#!/usr/bin/env bash
# The passes on vector units without their f16 -> f32 conversions in the products
# (2026-12-07, fourteenth session). The walk and the output pass read their f16 tiles
# from workgroup memory and converted each value where a product read it, eight
# invocations converting the same word; the new build (`new`) converts each word once,
# as it is copied into workgroup memory (the walk's stage in f32 an eighth of a chunk at
# a time, the output pass's in f32 whole, 24 KiB). Beside it: the commit before (`old`,
# a probe build: DELTATAPE_ROOT_<root> names a WGSL file read in place of the op's root)
# with the new output pass alone (`o32f`), and with its conversions left out altogether (`wnocvt`, `onocvt`: the words' bits read as
# f32, wrong values on purpose), what the conversions cost at most. Rounds alternate;
# record in the same command. First the new build's tests on the device.
# Carry [".dev/p14", ".gl"]; within BUDGET_S (default 420 s).
set -u
E=.dev/p14 DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p14)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
one=(--ops record_chunked --batches 1 --steps 8192 --dtypes bf16)
cells=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "t/chunk 150 gpu_fast_path" "t/lib 60 portable" "t/rollback 60 long_drafts"
  for round in 1 2; do
    c old old $vec -- "${cells[@]}"
    c new new $vec -- "${cells[@]}"
    c wnocvt old $vec DELTATAPE_ROOT_chunk_walk=$E/w/wnocvt.wgsl -- "${one[@]}"
    c onocvt old $vec DELTATAPE_ROOT_chunk_out=$E/w/onocvt.wgsl -- "${one[@]}"
    c o32f old $vec DELTATAPE_ROOT_chunk_out=$E/w/o32f.wgsl -- "${one[@]}"
  done
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c new new $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  stats new vkstats chunk_walk chunk_out
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/convert.txt"
