#!/usr/bin/env bash
# Owed from the eighth session (2026-12-06), on an H100 or H200 in one command: why the
# two-table first pass in f32 (853-855 us at B = 1, T = 8192 in benches/results/
# h100-2026-12-06-p1-bshare.txt) is not the seventh session's g3 (805, the same products
# and tables for f32): base (c39e289's chunk_prep.wgsl, on main until the eighth
# session: two tables, `slot` choosing by PARTS) against g3 itself (one table for
# every dtype), slots48 (base with the two tables as one, the part count a constant
# offset) and main (047feb8's one table again), alternating twice at f32 and bf16;
# the driver's register counts and binary sizes of the four; fla 0.6.0's chunk kernel
# (CUDA graphs) in the same command; the fast-path tests' errors on base's and g3's
# roots (equal if the two compute the same); then main's chunk, record lib, rollback
# and layer tests on the matrix units (main's build). Within BUDGET_S (default 400 s).
#
# Expects .gl/ and .dev/s13/ (its README says how each was made): pv(.gz) (main with
# src/engine/source.rs reading DELTATAPE_ROOT_<root> from a file), vkstats(.gz),
# w/{base,g3,slots48,main}.wgsl, spv/*.spv.hex(.gz), t/{chunk,lib,rollback,layer}(.gz) (pv's
# test executables), fla/ (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry
# [".dev/s13", ".gl"].
set -u
E=.dev/s13 DEFAULT_BUDGET_S=400
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/pv
RESERVE_S=${RESERVE_S:-260}
v() { variant pv "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  for round in 1 2; do
    for n in main base g3 slots48; do v $n 8192 f32; v $n; done
  done
  timeout 30 "$E/vkstats" $E/spv/*.spv.hex 2>&1 | sed "s|$E/spv/||"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  CASES="1:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
    timeout 60 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -4
  # Whether main's f32 pass computes what g3's does, from the fast-path tests' reported
  # errors: in f32 the two have the same products and sums, so the same errors to the
  # last digit (bf16's may differ: g3 orders its Gram slots by the other table).
  for n in base g3; do
    [ "$(left)" -lt 150 ] && { echo "skipped errors on $n"; continue; }
    echo "== fast-path errors on $n's root"
    DELTATAPE_ROOT_chunk_prep=$E/w/$n.wgsl timeout 60 "$E/t/chunk" --nocapture \
      --test-threads 1 gpu_fast_path_matches_record > "$OUT/err-$n.log" 2>&1; echo "rc $?"
    grep -E "gpu fast path|test result" "$OUT/err-$n.log" | head -24
  done
  tests "chunk 100" "lib 40 record" "rollback 50" "layer 40"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/slots.txt"
