#!/usr/bin/env bash
# record's thresholds for the fast path (`chunked_from_steps`, `chunked_max_heads`;
# issue 50, item 4) in one command on an H100 or H200: record token by token
# (DELTATAPE_RECORD_CHUNKED=0) against the fast path (record_chunked --fast-f16) over
# B = 1, 2, 4 and T = 512 ... 8192, bf16 and f32 (Qwen3-Next's heads: 32 value heads a
# sequence), twice, alternating. Within BUDGET_S (default 300 s); logs under $OUT.
#
# Expects .gl/ (shared/gpu/README.md) and .dev/p24/new(.gz) (the `deltatape` binary).
# Run with carry [".dev/p24", ".gl"]: bash benches/h200_thresholds.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-300} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan
N=$PWD/.dev/p24/new; [ -f $N.gz ] && gunzip -f $N.gz; chmod +x $N
G="--batches 1,2,4 --steps 512,1024,2048,4096,8192 --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  for r in 1 2; do
    [ "$(left)" -lt 60 ] && break
    DELTATAPE_RECORD_CHUNKED=0 timeout 90 $N bench --ops record $G 2>&1 | grep -E "^record|rror" | sed "s/^/sequential /"
    timeout 90 $N bench --fast-f16 --ops record_chunked $G 2>&1 | grep -E "^record|rror" | sed "s/^/fast /"
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/thresholds.txt"
