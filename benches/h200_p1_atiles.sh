#!/usr/bin/env bash
# The seventh session's third call (2026-12-06) on an H100 or H200, in one command: the
# first pass's phase 6 with each subgroup's row of A's tiles loaded once for W's blocks
# and once for U's (p6a: the same products and values; main loads both parts of four A
# tiles again for each of the 4 + Dv / 32 blocks), and p6b (p6a with the high and low
# parts' products in two chains added at the end: other sums), against main's (base),
# alternating twice, GPU us at B = 1, T = 8192 (bf16, f32) and B = 4 (bf16) and
# T = 2048; the driver's register counts; then the chunk and record_chunked lib tests
# on the matrix units for p6a (built in) and p6b (DELTATAPE_ROOT_chunk_prep). Within
# BUDGET_S (default 400 s).
#
# Expects .gl/ and .dev/s10/: pv3(.gz) (p6a's tree with src/engine/source.rs reading
# DELTATAPE_ROOT_<root> from a file, kept out of the branch), vkstats(.gz),
# w/{base,p6a,p6b}.wgsl, spv3/*.spv.hex, t3/{chunk,lib}(.gz) (pv3's test executables).
# Run with carry [".dev/s10", ".gl"].
set -u
E=.dev/s10 DEFAULT_BUDGET_S=400
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/pv3
RESERVE_S=90
v() { variant pv3 "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    for n in base p6a p6b; do v $n; v $n 8192 f32; v $n 8192 bf16 4; v $n 2048; done
  done
  timeout 60 "$E/vkstats" $E/spv3/*.spv.hex 2>&1 | sed "s|$E/spv3/||"
  mkdir -p $E/t; cp $E/t3/* $E/t/
  tests "chunk 100" "lib 60 record_chunked"
  export DELTATAPE_ROOT_chunk_prep=$E/w/p6b.wgsl
  for x in chunk lib; do mv $OUT/t-$x.log $OUT/t-$x-p6a.log; done
  tests "chunk 100" "lib 60 record_chunked"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/atiles.txt"
