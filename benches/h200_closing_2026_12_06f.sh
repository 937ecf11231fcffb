#!/usr/bin/env bash
# The fourth session's last call (2026-12-06), after the loads moved (benches/h200_loads.sh):
# HEAD's chunk, record_chunked lib and varlen tests on an H100 or H200, then the fast
# path's passes at B = 1 (T 2048, 8192) and B = 4 (T 8192), bf16 and f32. Within
# BUDGET_S (default 240 s).
#
# Expects .gl/ and .dev/fin5/: new(.gz) (HEAD's `deltatape`), t/{chunk,lib,varlen}(.gz)
# (HEAD's stripped test executables). Run with carry [".dev/fin5", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-240} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/fin5; N=$E/new; export DELTATAPE_BIN=$N
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for t in "chunk 90" "lib 60 record_chunked" "varlen 40"; do
    set -- $t; [ "$(left)" -lt 60 ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/t-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED" "$OUT/t-$1.log" | head -4
    grep -cE "cooperative-matrix path" "$OUT/t-$1.log"
  done
  [ "$(left)" -gt 40 ] && timeout 40 $N bench --fast-f16 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "^record|rror"
  [ "$(left)" -gt 40 ] && timeout 40 $N bench --fast-f16 --ops record_chunked --batches 4 --steps 8192 --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "^record|rror"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/closing.txt"
