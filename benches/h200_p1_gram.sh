#!/usr/bin/env bash
# The seventh session's fourth call (2026-12-06) on an H100 or H200, in one command: the
# first pass's Gram products with each subgroup's three output tiles in one column tile
# of K, whose B operand is loaded once for the three (g3: the same products and values)
# against the pass before it (p6a, main's with phase 6's A tiles loaded once),
# alternating twice, GPU us at B = 1, T = 8192 (bf16, f32); the driver's register
# counts; then on g3's build the chunk and record_chunked lib tests on the matrix units,
# and the varlen, layer and rollback tests while time is left (the session's last
# device seconds). Within BUDGET_S (default 170 s).
#
# Expects .gl/ and .dev/s10/: pv4(.gz) (g3's tree with src/engine/source.rs reading
# DELTATAPE_ROOT_<root> from a file, kept out of the branch), vkstats(.gz),
# w/{p6a,g3}.wgsl, spv4/*.spv.hex, t4/{chunk,lib,varlen,layer,rollback}(.gz) (pv4's
# test executables). Run with carry [".dev/s10", ".gl"].
set -u
E=.dev/s10 DEFAULT_BUDGET_S=170
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/pv4
RESERVE_S=100
v() { variant pv4 "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    for n in p6a g3; do v $n; v $n 8192 f32; done
  done
  timeout 20 "$E/vkstats" $E/spv4/*.spv.hex 2>&1 | sed "s|$E/spv4/||"
  mv $E/t4 $E/t
  tests "chunk 50" "lib 30 record_chunked" "varlen 20" "layer 30" "rollback 30"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/gram.txt"
