#!/usr/bin/env bash
# The fifth session's last call (2026-12-06) on an H100 or H200: HEAD's chunk tests on
# the matrix units (record's thresholds with bf16's own pair budget,
# chunked_max_heads_half = 128, among them); record at its defaults against record forced
# token by token (DELTATAPE_RECORD_CHUNKED=0) at B = 3 and 4, T = 512 and 1024, bf16 and
# f32; then the record lib, varlen, layer and rollback tests while time is left. Within
# BUDGET_S (default 300 s).
#
# Expects .gl/ and .dev/s6/: new(.gz) (HEAD's `deltatape`), t/{chunk,lib,varlen,layer,
# rollback}(.gz) (HEAD's stripped test executables). Run with carry [".dev/s6", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-300} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/s6; N=$E/new; export DELTATAPE_BIN=$N
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
{ nvidia-smi --query-gpu=name --format=csv,noheader
  tests() { for t in "$@"; do
    set -- $t; [ "$(left)" -lt $(( $2 + 10 )) ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/t-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|fast path by default" "$OUT/t-$1.log" | sort | uniq -c | head -6
  done; }
  tests "chunk 90"
  for c in default 0; do
    [ "$(left)" -lt 30 ] && break
    e=(); [ $c = 0 ] && e=(DELTATAPE_RECORD_CHUNKED=0)
    env ${e[@]+"${e[@]}"} timeout 30 $N bench --fast-f16 --ops record --batches 3,4 --steps 512,1024 \
      --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "^record|rror" | sed "s/^/$c /"
  done
  tests "lib 60 record" "varlen 40" "layer 50" "rollback 40"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/half.txt"
