#!/usr/bin/env bash
# The session's closing run (2026-12-06) on an H100 or H200, in one command: HEAD's
# chunk (the cooperative path, record_varlen on it), lib (the fast path's portable
# twins), varlen, layer, model and rollback tests, one at a time, and the chunk tests
# again with the first pass split; then the fast path timed pass by pass (bf16 and f32,
# B = 1, T = 8192), whole and split alternating. Logs under $OUT.
# Expects .gl/ and .dev/vc/ (new, t/{chunk,lib,varlen,layer,model,rollback}, gzipped).
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/vc; for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
export DELTATAPE_BIN=$E/new
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
  for t in chunk "lib record_chunked" varlen layer model rollback; do
    set -- $t
    echo "== $1"
    CARGO_MANIFEST_DIR=$PWD timeout 150 "$E/t/$1" --test-threads 1 --nocapture ${2:-} > "$OUT/$1.log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|cooperative-matrix path on|on the fast path|twins|chunked packed" "$OUT/$1.log" | sort | uniq -c | head -12
  done
  echo "== chunk with DELTATAPE_CHUNK_PREP_SPLIT=1"
  DELTATAPE_CHUNK_PREP_SPLIT=1 timeout 150 "$E/t/chunk" --test-threads 1 --nocapture > "$OUT/chunk-split.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked" "$OUT/chunk-split.log"
  for split in 0 1 0 1; do
    DELTATAPE_CHUNK_PREP_SPLIT=$split timeout 40 "$E/new" bench --fast-f16 --ops record_chunked \
      --batches 1 --steps 8192 --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 \
      | grep -E "^record_chunked|rror" | sed "s/^/split=$split /"
  done
} > "$OUT/closing.txt" 2>&1
cat "$OUT/closing.txt"
