#!/usr/bin/env bash
# The walk's time before and after the session of 2026-12-06 (issue 50), on an H100 or
# H200 in one command: the fast path timed pass by pass at B = 1 and 4, T = 2048 and
# 8192, bf16 and f32, alternating four binaries (.dev/vc/: old = ef4c618, ece =
# ece1cca, new = the walk's cooperative ops behind helpers, inline = the helpers' twin
# only, the cooperative path's code as before), twice; then HEAD's chunk tests (t/chunk2)
# with record_varlen on the fast path. Logs under $OUT.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/vc; for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
fp() {
  timeout 40 "$E/$1" bench --fast-f16 --ops record_chunked --batches 1,4 --steps 2048,8192 \
    --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "chunk_walk|rror" | sed "s/^/$1 /"
}
for r in 1 2; do for b in old ece new inline; do fp $b; done; done > "$OUT/walk.txt" 2>&1
DELTATAPE_BIN=$E/new timeout 120 "$E/t/chunk2" --test-threads 1 --nocapture > "$OUT/chunk2.log" 2>&1
echo "chunk2 rc $?" >> "$OUT/walk.txt"
grep -E "^test result|panicked|record_varlen on the fast path" "$OUT/chunk2.log" >> "$OUT/walk.txt"
cat "$OUT/walk.txt"
