#!/usr/bin/env bash
# The seventh session's first call (2026-12-06) on an H100 or H200, in one command:
# 1. the chunk tests on main's build (196c35f's first-pass refactor on the matrix units);
# 2. where `chunk_prep_coop`'s time goes between memory and the rest: the pass's WGSL
#    swapped in a probe build (DELTATAPE_ROOT_chunk_prep) for variants that give wrong
#    values on purpose, alternating twice with main's (base): hot (every load from
#    the head's first chunk, which stays in L2), nostore (every global store behind a
#    condition false at run time), floor (both), and lo6 (phase 6's products with A's
#    high part alone: fewer products, slightly different values); and the walk's
#    (DELTATAPE_ROOT_chunk_walk_coop) whot: every chunk's loads from the head's first
#    chunk; GPU us at B = 1, T = 8192, bf16 and f32;
# 3. the driver's register counts of each variant and of the walk and output passes
#    (benches/vk_stats.rs);
# 4. fla 0.6.0's chunk kernel (CUDA graphs); the record lib, varlen, layer and rollback
#    tests on main's build while time is left. Within BUDGET_S (default 480 s).
#
# Expects .gl/ and .dev/s10/: new(.gz) (main's `deltatape`), pv(.gz) (main with
# src/engine/source.rs reading DELTATAPE_ROOT_<root> from a file, kept out of the
# branch), vkstats(.gz) (`cargo bench --bench vk_stats --no-run`), w/*.wgsl (the
# variants, from main's chunk_prep.wgsl by the sed lines in .dev/s10/w/README),
# spv/*.spv.hex (`deltatape msl ... --lang spirv` of each), t/{chunk,lib,varlen,layer,
# rollback}(.gz) (main's stripped test executables), fla/ (fla_prefill_bench.py, the
# wheels). Run with carry [".dev/s10", ".gl"].
set -u
E=.dev/s10 DEFAULT_BUDGET_S=480
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/new
v() { variant pv "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "chunk 100"
  for round in 1 2; do
    for n in base hot nostore floor lo6 whot; do v $n 8192 bf16; done
    for n in base floor lo6; do v $n 8192 f32; done
  done
  v base 8192 bf16 4; v floor 8192 bf16 4
  timeout 60 "$E/vkstats" $E/spv/*.spv.hex 2>&1 | sed "s|$E/spv/||"
  if [ "$(left)" -gt 150 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -8
  fi
  tests "lib 70 record" "varlen 50" "layer 60" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/floor.txt"
