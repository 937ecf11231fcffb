#!/usr/bin/env bash
# The fourth session's last call (2026-12-06) on an H100 or H200, in one command: HEAD's
# chunk, record lib, varlen, layer and rollback tests (one fast path: the first pass's
# split form removed; the output pass at 128 columns; record_varlen's refitted split);
# the fast path's passes and record at B = 1 (T 2048, 8192) and B = 4 (T 8192) beside fla
# 0.6.0's chunk kernel (CUDA graphs); record_varlen by default on fla's 8 prompts and on
# 8192 beside 64 of 100, beside fla's varlen call. Within BUDGET_S (default 420 s).
#
# Expects .gl/ and .dev/fin4/: new(.gz) (HEAD's `deltatape`), t/{chunk,lib,varlen,layer,
# rollback}(.gz) (HEAD's stripped test executables), fla/ (fla_prefill_bench.py,
# fla_varlen_bench.py, the fla 0.6.0 wheels). Run with carry [".dev/fin4", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-420} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/fin4; N=$E/new; export DELTATAPE_BIN=$N
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
MANY=8192$(printf ',100%.0s' $(seq 64))
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for t in "chunk 120" "lib 90 record" "varlen 60" "layer 90" "rollback 60"; do
    set -- $t; [ "$(left)" -lt 120 ] && { echo "skipped $1"; continue; }
    echo "== test $1"; timeout $2 $E/t/$1 --nocapture --test-threads 1 ${3:-} > "$OUT/t-$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|fast path by default|cooperative-matrix path" "$OUT/t-$1.log" | sort | uniq -c | head -8
  done
  b() { [ "$(left)" -lt 50 ] && { echo "skipped bench $*"; return; }
    timeout 45 $N bench --fast-f16 "$@" --warmup 2 --copy-mib 64 2>&1 | grep -E "^record|rror"; }
  b --ops record_chunked,record --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5
  b --ops record_chunked --batches 4 --steps 8192 --dtypes bf16,f32 --runs 3
  b --ops record_varlen --dtypes bf16,f32 --runs 5
  b --ops record_varlen --dtypes bf16 --runs 5 --lens $MANY
  if [ "$(left)" -gt 90 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
    PYTHONPATH=/tmp/site timeout 60 python3 $E/fla/fla_varlen_bench.py 2>&1 | grep -E "RESULT|Error|error" | head -6
    LENS=$MANY PYTHONPATH=/tmp/site timeout 60 python3 $E/fla/fla_varlen_bench.py 2>&1 | grep -E "RESULT|Error|error" | head -6
  fi
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/closing.txt"
