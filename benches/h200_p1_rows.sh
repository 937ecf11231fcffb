#!/usr/bin/env bash
# The sixth session's call (2026-12-06) on an H100 or H200, in one command: the first
# pass with M's tiles stored four values at a time (Gam along rows by backward running
# products), A's completion (5c) over its stored tiles in quads, and the gates' running
# products unrolled (new), the same without the unrolled gates (nog), against main
# before them (old), alternating; then new's chunk tests (record's bf16 pair budget,
# chunked_max_heads_half, among them: the fifth session's owed call), record at its
# defaults against record token by token at B = 3 / 4, fla 0.6.0's chunk kernel (CUDA
# graphs) for the same cells, and the record lib, varlen, layer and rollback tests while
# time is left. Within BUDGET_S (default 540 s).
#
# Expects .gl/ and .dev/s7/: old(.gz), new(.gz), nog(.gz) (`deltatape` builds),
# t/{chunk,lib,varlen,layer,rollback}(.gz) (new's stripped test executables), fla/
# (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s7", ".gl"].
set -u
E=.dev/s7 DEFAULT_BUDGET_S=540
. benches/device_env.sh # left, b, tests
N=$E/new; export DELTATAPE_BIN=$N
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for r in 1 2; do
    for bin in old new nog; do b $bin --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5; done
    for bin in old new nog; do b $bin --batches 4 --steps 8192 --dtypes bf16 --runs 3; done
  done
  tests "chunk 100"
  for c in default 0; do
    [ "$(left)" -lt 60 ] && break
    e=(); [ $c = 0 ] && e=(DELTATAPE_RECORD_CHUNKED=0)
    env ${e[@]+"${e[@]}"} timeout 40 $N bench --fast-f16 --ops record --batches 3,4 --steps 512,1024 \
      --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "^record|rror" | sed "s/^/$c /"
  done
  if [ "$(left)" -gt 90 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
  fi
  tests "lib 70 record" "varlen 50" "layer 60" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/p1.txt"
