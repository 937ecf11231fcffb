#!/usr/bin/env bash
# The eighth session's call (2026-12-06) on an H100 or H200, in one command, with the
# seventh session's owed check folded in (it replaces benches/h200_p1_confirm.sh): the
# first pass as on main (base: c39e289's per-dtype file, never timed whole) against
# 047feb8's (old, once) and against two candidates: bshare (each B tile of phase 6 and
# of the merges loaded once for A's two parts) and bshare2 (also the f32 Gram products'
# A tiles loaded once for both of K's parts), the same products and sums (neither was
# faster: docs/PERFORMANCE.md); alternating twice at B = 1, T = 8192 (bf16,
# f32), and at B = 4 (bf16) once. The walk with its state's f16 hand-off behind a
# subgroup barrier in place of a workgroup one (wsgb: each subgroup converts only the
# rows it stored) against wbase: a probe of what that barrier costs, not a form to keep
# (naga's subgroupBarrier carries no workgroup-memory semantics). fla 0.6.0's chunk
# kernel (CUDA graphs) in the same command; the driver's register counts and stack sizes
# (those variants', and record's, record_layer's and the prologue's); the chunk tests on
# the matrix units on bshare2's root (bf16's code is bshare's), then on bshare's build the
# record lib, rollback, varlen and layer tests while time is left. Within BUDGET_S
# (default 430 s; RESERVE_S, default 220, kept for what follows the variants). It ran
# once, on an H100, as `BUDGET_S=330 RESERVE_S=150 bash benches/h200_p1_bshare.sh` (the
# session's last device minutes; benches/results/h100-2026-12-06-p1-bshare.txt): the
# chunk and layer tests did not fit, and fla's f32 rows did not print.
#
# Expects .gl/ and .dev/s12/ (its README says how each was made): pv(.gz) (bshare's
# tree with src/engine/source.rs reading DELTATAPE_ROOT_<root> from a file and
# SUBGROUP_BARRIER among the wanted features and naga's capabilities, kept out of the
# branch), vkstats(.gz), w/{old,base,bshare,bshare2,wbase,wsgb}.wgsl,
# spv/*.spv.hex(.gz), t/{chunk,lib,rollback,varlen,layer}(.gz) (pv's test executables),
# fla/ (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s12", ".gl"].
set -u
E=.dev/s12 DEFAULT_BUDGET_S=430
. benches/device_env.sh # left, tests, variant
export DELTATAPE_BIN=$E/pv
RESERVE_S=${RESERVE_S:-220}
v() { variant pv "$@"; } # benches/device_env.sh
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  v old; v old 8192 f32
  for round in 1 2; do
    for n in base bshare; do v $n; v $n 8192 f32; done
    v bshare2 8192 f32
    for n in wbase wsgb; do v $n; done
  done
  for n in base bshare; do v $n 8192 bf16 4; done
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  CASES="1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
    timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -8
  timeout 30 "$E/vkstats" $E/spv/*.spv.hex 2>&1 | sed "s|$E/spv/||"
  echo "== on bshare2's root:"; export DELTATAPE_ROOT_chunk_prep=$E/w/bshare2.wgsl
  tests "chunk 100"; unset DELTATAPE_ROOT_chunk_prep
  tests "lib 40 record" "rollback 50" "varlen 30" "layer 40"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/bshare.txt"
