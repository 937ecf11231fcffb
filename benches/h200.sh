#!/usr/bin/env bash
# The H200 run of the README's performance section, in one command on the device
# machine: the crate's tests, demo and GPU bench, then fla's Triton kernel and torch's
# copy bandwidth (shared/bench/fla_bench.py: CUDA-graph GPU time, and the per-step
# snapshot verify that is the rollback peer of `deltatape round`), side by side. Expects .dev/ to hold the
# deltatape binary, the test executables, fla_bench.py and the fla wheels, and .gl/ the
# Vulkan loader with libglvnd (see shared/gpu/README.md; the NVIDIA ICD also needs
# libegl1 libglvnd0 libgl1 libglx0). SKIP_TESTS, SKIP_BENCH, SKIP_FLA=1 leave parts out.
# Writes logs under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
export DELTATAPE_BIN=$PWD/.dev/deltatape
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
.dev/deltatape info 2>&1 | tee "$OUT/info.txt"
status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in .dev/*-*; do
    # dawn-*: Dawn for node is installed by .ci/run in CI, not carried here.
    case "$t" in *.whl|*.py|*.d|.dev/dawn-*) continue;; esac
    echo "== $t" | tee -a "$OUT/tests.txt"
    # A bound per test binary, so that a hang shows as a failure and the bench still runs.
    timeout "${TEST_TIMEOUT:-240}" "$t" > "$OUT/test.log" 2>&1
    rc=$?
    # A failing binary's whole log is kept (a hang shows which tests never finished).
    [ "$rc" = 0 ] || { status=1; echo "exit $rc" | tee -a "$OUT/tests.txt"; cp "$OUT/test.log" "$OUT/$(basename "$t").log"; }
    grep -E "^test result|panicked|FAILED" "$OUT/test.log" | tee -a "$OUT/tests.txt"
  done
  .dev/deltatape demo 2>&1 | tee "$OUT/demo.txt" || status=1
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  # A whole model's resident round (draft, GPU acceptance, commit), as an engine runs it.
  .dev/deltatape round 2>/dev/null | tee "$OUT/round.txt"
  # The same with the conv inputs written where the rollback keeps them (no copy).
  .dev/deltatape round --modes single --conv-in-place 2>/dev/null | tee "$OUT/round-in-place.txt"
  # The draft in 4 parts, each submitted once encoded (the GPU starts on the first layers
  # while the host encodes the rest).
  .dev/deltatape round --modes single --conv-in-place --draft-parts 4 2>/dev/null | tee "$OUT/round-parts.txt"
  # Each commit deferred to the next round's draft, which folds it into the state as it
  # reads it (one pass over the state where a commit and a draft make two).
  .dev/deltatape round --modes single --conv-in-place --deferred 2>/dev/null | tee "$OUT/round-deferred.txt"
  # Without the conv window, like the snapshot peer, whose verify has no conv work.
  .dev/deltatape round --modes single --no-conv 2>/dev/null | tee "$OUT/round-no-conv.txt"
  .dev/deltatape round --modes single --no-conv --deferred 2>/dev/null | tee "$OUT/round-deferred-no-conv.txt"
  # And encoded whole before one submission (host and GPU work not overlapped).
  .dev/deltatape round --modes single --one-submission 2>/dev/null | tee "$OUT/round-one-submission.txt"
  .dev/deltatape bench ${BENCH_ARGS:---dtypes f32,bf16} --svg "$OUT/bench.svg" 2>/dev/null | tee "$OUT/bench.txt"
fi
# SWEEP: shape classes to try, e.g. SWEEP="RECORD_LANES=8,RECORD_RPT=4 REPLAY_CHUNK=16";
# each entry's variables get the DELTATAPE_ prefix, the op is the first one's.
for v in ${SWEEP:-}; do
  op=$(echo "${v%%_*}" | tr A-Z a-z)
  echo "== sweep $v" | tee -a "$OUT/sweep.txt"
  env $(echo "$v" | tr , ' ' | sed -E 's/(^| )/\1DELTATAPE_/g') .dev/deltatape bench --ops "$op" \
      --dtypes f32 --batches ${SWEEP_BATCHES:-64,256} --runs 10 2>/dev/null | grep -E "^($op|copy)" | tee -a "$OUT/sweep.txt"
done
if [ "${SKIP_FLA:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl \
    && PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 .dev/fla_bench.py 2>&1 | grep RESULT | tee "$OUT/fla.txt"
fi
exit $status
