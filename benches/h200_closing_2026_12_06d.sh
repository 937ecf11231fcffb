#!/usr/bin/env bash
# The third session's last call (2026-12-06) on an H100 or H200, in one command: HEAD's
# chunk, record_chunked / record lib, varlen, layer and rollback tests (the thresholds at
# 512 steps and 64 pairs: record's default choice and record_varlen's split at them),
# then record at its defaults over B = 1, 2, 4 and T = 512, 2048 (the rows name the form
# that ran), and record_varlen on fla's 8 prompts by default (now the two longest in
# chunks) against all chunked (DELTATAPE_RECORD_CHUNKED=1) and all token by token (=0).
# Within BUDGET_S (default 240 s); logs under $OUT.
#
# Expects .gl/ and .dev/fin/: new(.gz) (HEAD's `deltatape`), t/{chunk,lib,varlen,layer,
# rollback}(.gz) (HEAD's stripped test executables). Run with carry [".dev/fin", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-240} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/fin; N=$E/new; export DELTATAPE_BIN=$N
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for t in "chunk 90" "lib 60 record" "varlen 60" "layer 60" "rollback 60"; do
    set -- $t; [ "$(left)" -lt 70 ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/t-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|fast path by default" "$OUT/t-$1.log" | head -6
  done
  [ "$(left)" -gt 40 ] && timeout 40 $N bench --fast-f16 --ops record --batches 1,2,4 --steps 512,2048 --dtypes bf16,f32 --runs 3 --warmup 1 2>&1 | grep -E "^record|rror"
  for c in "" 1 0; do
    [ "$(left)" -lt 25 ] && continue
    env ${c:+DELTATAPE_RECORD_CHUNKED=$c} timeout 30 $N bench --fast-f16 --ops record_varlen --dtypes bf16,f32 --runs 5 --warmup 2 2>&1 | grep -E "^record|rror" | sed "s/^/chunked=${c:-default} /"
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/closing.txt"
