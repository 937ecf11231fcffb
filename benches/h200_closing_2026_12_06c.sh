#!/usr/bin/env bash
# The third session's closing call (2026-12-06) on an H100 or H200, in one command:
# benches/h200_thresholds.sh (record token by token against the fast path, B = 1, 2, 4,
# T = 512 ... 8192, with .dev/p24/new: the commit with chunk_prep_coop in 24 KiB), then
# a candidate phase 6 for that pass (.dev/v2: W and U in blocks of 32 columns, each
# subgroup one tile over the 4 inner tiles): its chunk tests and record_chunked lib
# tests on the matrix units, and its passes against p24/new's, alternating. Within
# BUDGET_S (default 480 s); logs under $OUT.
#
# Expects .gl/, .dev/p24/new(.gz), .dev/v2/v2(.gz) and .dev/v2/t/{chunk,lib}(.gz).
# Run with carry [".dev/p24", ".dev/v2", ".gl"]: bash benches/h200_closing_2026_12_06c.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-480} - ($(date +%s) - start) )); }
BUDGET_S=200 bash benches/h200_thresholds.sh
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/v2; N=$PWD/.dev/p24/new; export DELTATAPE_BIN=$E/v2
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
{ for t in "chunk 120" "lib 90 record_chunked"; do
    set -- $t; [ "$(left)" -lt 90 ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/v2-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED" "$OUT/v2-$1.log" | head -8
  done
  for r in 1 2; do for v in $N $E/v2; do
    [ "$(left)" -lt 40 ] && continue
    timeout 40 $v bench --fast-f16 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "chunk_prep|rror" | sed "s|^|$(basename $v) |"
  done; done
  for v in $N $E/v2; do
    [ "$(left)" -lt 30 ] && continue
    timeout 40 $v bench --fast-f16 --ops record_chunked --batches 4 --steps 8192 --dtypes bf16 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "chunk_prep|rror" | sed "s|^|$(basename $v) |"
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/v2.txt"
