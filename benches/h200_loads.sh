#!/usr/bin/env bash
# Whether a global load in flight holds up the next workgroupBarrier() (2026-12-06,
# fourth session), in one command on an H100 or H200: the walk with its next chunk's
# loads moved (walk_a: U's beside K's after the state update, two phases with loads
# where there were three; walk_b: W's, U's and K's all there, one phase), and the first
# pass with each next block's loads issued after the barrier that ends its staging, not
# before it (prep_a); each against the unchanged root (base), alternating, bf16,
# B = 1 and 4, T = 8192. Within BUDGET_S (default 240 s).
#
# Expects .gl/ and .dev/x5/: d(.gz) (a probe build of the commit before: the env var
# DELTATAPE_ROOT_<root> names a WGSL file read in place of the op's root), w/ (the
# variants, made from HEAD's roots). Run with carry [".dev/x5", ".gl"].
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-240} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/x5; for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
v() { local root=$1 n=$2
  [ "$(left)" -lt 25 ] && { echo "skip $root $n"; return; }
  env DELTATAPE_ROOT_$root=$E/w/$n.wgsl timeout 30 $E/d bench --fast-f16 --ops record_chunked --batches 1,4 \
    --steps 8192 --dtypes bf16 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "chunk_prep|rror" | sed "s/^/$n /"; }
{ nvidia-smi --query-gpu=name --format=csv,noheader
  for r in 1 2; do
    for n in walk_base walk_a walk_b; do v chunk_walk_coop $n; done
    for n in prep_base prep_a; do v chunk_prep $n; done
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/loads.txt"
