#!/usr/bin/env bash
# tests/dawn.rs on the H200 machine: Tint's check of every variant, and record / replay /
# repeat executed by Dawn on the NVIDIA Vulkan driver (subgroup 32), record included
# (ignored in CI), with and without the explicit zero-initialization workaround.
# Prepare here with `bash benches/dawn_h200.sh prepare` (fills .dev/dawn/: the test
# executable, node and the linux-x64 part of npm webgpu, about 45 MB); run there with
# .dev and .gl carried (see benches/h200.sh for .gl):  bash benches/dawn_h200.sh
set -u
if [ "${1:-}" = prepare ]; then
  set -e
  mkdir -p .dev/dawn
  exe=$(cargo test --test dawn --no-run --message-format=json 2>/dev/null \
    | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
  cp "$exe" .dev/dawn/dawn-test && strip .dev/dawn/dawn-test
  bash .ci/dawn/install.sh >/dev/null
  tar -C .ci/dawn -cJf .dev/dawn/webgpu.tar.xz --exclude='node_modules/webgpu/dist/[dw]*' \
    --exclude='node_modules/webgpu/dist/linux-arm64' check.mjs run.mjs package.json node_modules
  tar -C "$(dirname "$(readlink -f "$(command -v node)")")" -cJf .dev/dawn/node.tar.xz node
  du -sh .dev/dawn/*
  exit 0
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_DRIVER_FILES=$icd DELTATAPE_DAWN_ICD=$icd CI=true
dir=/tmp/dawn; mkdir -p $dir
tar -C $dir -xJf .dev/dawn/webgpu.tar.xz
if command -v node >/dev/null; then node=$(command -v node); else
  tar -C $dir -xJf .dev/dawn/node.tar.xz; node=$dir/node; fi
export DELTATAPE_NODE=$node DELTATAPE_DAWN_DIR=$dir DELTATAPE_DAWN_JOBS=4
status=0
.dev/dawn/dawn-test --include-ignored --nocapture --test-threads 1 2>&1 | tee "$OUT/dawn.txt" || status=1
DELTATAPE_DAWN_ZERO_INIT=1 .dev/dawn/dawn-test dawn_runs_record --include-ignored --nocapture \
  2>&1 | tee "$OUT/dawn_zero_init.txt" || status=1
exit $status
