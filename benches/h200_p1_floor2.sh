#!/usr/bin/env bash
# The seventh session's second call (2026-12-06) on an H100 or H200, in one command:
# what `chunk_prep_coop`'s compute floor (the first call's `floor`: no global stores,
# every load from the head's first chunk) is made of, by cutting one part of it at a
# time (results wrong on purpose): fnobar (every barrier), fnomma (every tile product
# and its tile loads), fnop6 (phase 6: W and U), fnop2 (phase 2: the Gram blocks);
# and one candidate with main's values, p6pre2 (phase 6's loads two blocks ahead),
# against main (base). GPU us of the pass at B = 1, T = 8192, bf16 (f32 and B = 4 for
# the candidate), alternating twice; the driver's register counts; the candidate's chunk
# and record_chunked lib tests on the matrix units. Within BUDGET_S (default 400 s).
#
# Expects .gl/ and .dev/s10/: pv(.gz) (main with src/engine/source.rs reading
# DELTATAPE_ROOT_<root> from a file, kept out of the branch), vkstats(.gz), w/*.wgsl
# (the variants, w/README), spv/*.spv.hex, t2/{chunk,lib}(.gz) (test executables built
# with p6pre2's WGSL). Run with carry [".dev/s10", ".gl"].
set -u
E=.dev/s10 DEFAULT_BUDGET_S=400
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/pv
v() { variant pv "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    for n in base p6pre2 floor fnobar fnomma fnop6 fnop2; do v $n; done
    for n in base p6pre2; do v $n 8192 f32; v $n 8192 bf16 4; done
  done
  timeout 60 "$E/vkstats" $E/spv/*.spv.hex 2>&1 | sed "s|$E/spv/||"
  mkdir -p $E/t; cp $E/t2/* $E/t/
  tests "chunk 100" "lib 70 record_chunked"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/floor2.txt"
