#!/usr/bin/env bash
# The fifth session's call (2026-12-06) on an H100 or H200, in one command: the first
# pass's stores four values at a time (tiles as vec4<f16>, U as vec4<u32>) and v read in
# pairs (new), and then W's and U's products as two chains of 4 (the high and the low
# parts, added at the end: new2), against the commit before (old), alternating; then
# new2's chunk, record_chunked lib, varlen, layer and rollback tests (the cooperative
# path), and fla 0.6.0's chunk kernel (CUDA graphs) for the same cells, and record against the fast path at B = 4. Within
# BUDGET_S (default 480 s).
#
# Expects .gl/ and .dev/s5/: old(.gz), new(.gz), new2(.gz) (`deltatape` at ef979ab, at
# 3c38c26 and with the two chains), t/{chunk,lib,varlen,layer,rollback}(.gz) (new2's
# stripped test executables), fla/
# (fla_prefill_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/s5", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-480} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/s5; N=$E/new2; export DELTATAPE_BIN=$N
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
b() { local bin=$1; shift; [ "$(left)" -lt 50 ] && { echo "skipped bench $*"; return; }
  timeout 45 $E/$bin bench --fast-f16 --ops record_chunked "$@" --warmup 2 --copy-mib 64 2>&1 \
    | grep -E "^record|chunk_prep|rror" | sed "s/^/$bin /"; }
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for r in 1 2; do
    for bin in old new new2; do b $bin --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5; done
    for bin in old new new2; do b $bin --batches 4 --steps 8192 --dtypes bf16 --runs 3; done
  done
  tests() { for t in "$@"; do
    set -- $t; [ "$(left)" -lt $(( $2 + 20 )) ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/t-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|fast path by default|cooperative-matrix path" "$OUT/t-$1.log" | sort | uniq -c | head -8
  done; }
  tests "chunk 100" "lib 80 record" "varlen 50"
  if [ "$(left)" -gt 80 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
  fi
  # chunked_max_heads (64) again: record token by token against the fast path at B = 4.
  [ "$(left)" -gt 60 ] && timeout 50 $N bench --fast-f16 --ops record,record_chunked --batches 4 \
    --steps 1024,8192 --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "^record|rror"
  tests "layer 70" "rollback 50"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/p1.txt"
