#!/usr/bin/env bash
# Issue 38's H200 run, in one command on the device machine: tests/layer.rs and
# tests/chunk.rs on the NVIDIA driver, then `deltatape bench` of record and record_layer
# (prepared inputs against raw ones) at B 1, 8, 64, 256 and T 1, 4, 8, 16, bf16 and f32,
# then fla 0.6.0's conv + fused recurrence chain (shared/bench/fla_layer_bench.py, CUDA
# graphs) beside it. Expects .dev/ to hold the deltatape binary, the layer-* and chunk-*
# test executables, fla_layer_bench.py and the fla wheels, and .gl/ the Vulkan loader
# (shared/gpu/README.md). Writes logs under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
export DELTATAPE_BIN=$PWD/.dev/deltatape
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; .dev/deltatape info; } 2>&1 | tee "$OUT/info.txt"
for n in layer chunk; do
  f=$(ls .dev/$n-* | head -1)
  timeout 90 "$f" > "$OUT/test-$n.log" 2>&1; echo "$n rc $?" | tee -a "$OUT/tests.txt"
  grep -E "^test |^test result|panicked|FAILED" "$OUT/test-$n.log" | tee -a "$OUT/tests.txt"
done
timeout 200 .dev/deltatape bench --ops record,record_layer --batches 1,8,64,256 \
  --steps 1,4,8,16 --dtypes bf16,f32 --runs 20 > "$OUT/bench.txt" 2> "$OUT/bench.err"
echo "bench rc $?"; cat "$OUT/bench.txt"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl 2>&1 | tail -2
PYTHONPATH=/tmp/site timeout 170 python3 .dev/fla_layer_bench.py > "$OUT/fla.txt" 2>&1
echo "fla rc $?"; grep RESULT "$OUT/fla.txt"
