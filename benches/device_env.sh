# The setup the device calls' scripts share (benches/h200_p1_*.sh and later ones),
# sourced from the repository root after they set E (the carried folder of builds and
# test executables, relative to the root) and DEFAULT_BUDGET_S:
# - the .gl/ libraries unpacked, NVIDIA's Vulkan driver chosen, CI=true (a test without
#   an adapter fails);
# - every *.gz under $E unpacked and made executable, and E made absolute;
#   DELTATAPE_BIN=$E/bin where it exists (the tests that run the binary);
# - left: the seconds left of BUDGET_S (default DEFAULT_BUDGET_S);
# - b BIN ARGS...: `$E/BIN bench --fast-f16 --ops record_chunked ARGS`, its rows and
#   pass lines prefixed with BIN (skipped with under a minute left);
# - tests "NAME SECONDS [FILTER]"...: the test executable $E/t/NAME (or $E/NAME where
#   NAME has a slash: a build's own t/), its log in $OUT/t-NAME.log and its summary printed (skipped where the time left is short);
# - variant BIN NAME [STEPS DTYPE BATCHES]: `$E/BIN bench --fast-f16 --ops
#   record_chunked` (5 runs; T = 8192, bf16, B = 1 by default) with $E/w/NAME.wgsl, where
#   it exists, in place of a pass's WGSL (a probe build's DELTATAPE_ROOT_<root>: the
#   walk's for names from `w`, else the first pass's), its pass line prefixed with NAME
#   (skipped with under RESERVE_S seconds left, default 60).
# - c NAME BIN [ENV...] -- BENCH-ARGS...: `$E/BIN bench --dims 16,32,128,128` (5 runs)
#   with those variables set, its rows prefixed with NAME (skipped with under 30 s left).
# - stats BIN VKSTATS KERNEL...: each KERNEL's bf16 SPIR-V from `$E/BIN msl` into $OUT,
#   then the driver's statistics of every such file there from `$E/VKSTATS`
#   (benches/vk_stats.rs), where it exists.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-$DEFAULT_BUDGET_S} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/$E
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
# The tests that run the binary (tests/demo.rs, varlen's bench test) find it here.
[ -x "$E/bin" ] && export DELTATAPE_BIN=$E/bin
b() {
  local bin=$1; shift
  [ "$(left)" -lt 60 ] && { echo "skipped bench $*"; return; }
  timeout 45 "$E/$bin" bench --fast-f16 --ops record_chunked "$@" --warmup 2 --copy-mib 64 2>&1 \
    | grep -E "^record|chunk_prep|rror" | sed "s/^/$bin /"
}
tests() {
  for t in "$@"; do
    set -- $t
    [ "$(left)" -lt $(( $2 + 10 )) ] && { echo "skipped $1"; continue; }
    echo "== test $1"
    # NAME is a test executable under $E/t, or a path under $E (a build's own t/).
    local exe="$E/t/$1" log="$OUT/t-${1//\//-}.log"
    case $1 in */*) exe="$E/$1" ;; esac
    timeout "$2" "$exe" --nocapture --test-threads 1 ${3:-} > "$log" 2>&1; echo "rc $?"
    grep -E "^test result|panicked|FAILED|fast path by default|cooperative-matrix path" "$log" \
      | sort | uniq -c | head -8
  done
}
variant() {
  local bin=$1 n=$2 steps=${3:-8192} dt=${4:-bf16} batches=${5:-1}
  [ "$(left)" -lt "${RESERVE_S:-60}" ] && { echo "skipped $n $steps $dt"; return; }
  local envs=()
  if [ -f "$E/w/$n.wgsl" ]; then
    case $n in w*) envs=(DELTATAPE_ROOT_chunk_walk_coop=$E/w/$n.wgsl) ;;
      *) envs=(DELTATAPE_ROOT_chunk_prep=$E/w/$n.wgsl) ;; esac
  fi
  timeout 60 env "${envs[@]}" "$E/$bin" bench --fast-f16 --ops record_chunked --batches $batches \
    --steps $steps --dtypes $dt --runs 5 --warmup 2 --copy-mib 64 2>&1 \
    | grep -E "chunk_prep|rror" | sed "s/^/$n /"
}
c() {
  local name=$1 bin=$2; shift 2; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 30 ] && { echo "skipped $name $*"; return; }
  timeout 90 env "${envs[@]}" "$E/$bin" bench --dims 16,32,128,128 --runs 5 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
stats() {
  local bin=$1 vk=$2; shift 2
  for k in "$@"; do
    "$E/$bin" msl "$k" --lang spirv --dtype bf16 > "$OUT/$k.spv.hex" 2>/dev/null
  done
  [ -x "$E/$vk" ] && timeout 60 "$E/$vk" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
}
