#!/usr/bin/env bash
# W and U by forward substitution down each column of the gated system (no inverse, no
# merges, no W / U tile products), in both first passes (`new`: chunk_prep on vector
# units, chunk_prep_coop after its Gram products on the matrix units; built from
# 9ba771e on the branch coop-subst, whose matrix-unit pass was not kept) against the
# commit before (`old`, 4a54764), rounds alternating, beside record; `unrolled` is the
# vector pass with its substitution unrolled whole (a probe build's
# DELTATAPE_ROOT_chunk_prep, not in the crate: lavapipe took minutes to compile it).
# First the new build's tests on the device: chunk (both forms), the lib's passes on
# vector units against their twin, the rollback's long drafts, varlen and layer (the
# fast path over packed prompts and raw inputs). Carry [".dev/p19", ".gl"]; within
# BUDGET_S (default 500 s).
set -u
E=.dev/p19 DEFAULT_BUDGET_S=500
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p19)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "t/chunk 150" "t/lib 60 portable" "t/rollback 60 long_drafts" "t/varlen 90" "t/layer 90"
  for round in 1 2; do
    c old old $vec -- "${cells[@]}"
    c new new $vec -- "${cells[@]}"
    c coop-old old -- --fast-f16 "${cells[@]}"
    c coop-new new -- --fast-f16 "${cells[@]}"
  done
  c unrolled probe $vec DELTATAPE_ROOT_chunk_prep=$E/w/unrolled.wgsl -- --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  c record new -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  stats old vkstats chunk_prep chunk_prep_coop
  for k in chunk_prep chunk_prep_coop; do mv "$OUT/$k.spv.hex" "$OUT/old_$k.spv.hex"; done
  stats new vkstats chunk_prep chunk_prep_coop
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/prep-subst.txt"
