#!/usr/bin/env bash
# Installs what tests/dawn.rs needs, into .ci/dawn only (idempotent; seconds when done):
#  - node_modules/webgpu: Dawn for node (npm `webgpu`, pinned by package-lock.json);
#  - mesa/: Mesa's lavapipe from bookworm-backports (25.x), extracted with dpkg -x and
#    named by mesa/lvp_icd.json (tests/dawn.rs passes it as VK_DRIVER_FILES). Dawn finds
#    no adapter on Debian 12's own lavapipe (22.3.6). Nothing is installed system-wide:
#    the system lavapipe that wgpu's GPU tests use stays as it is.
# Needs node and npm on PATH, root for apt-get, and the system mesa-vulkan-drivers
# (its libraries, LLVM among them, are the extracted driver's dependencies).
set -euo pipefail
cd "$(dirname "$0")"
here="$(pwd)"

if [ "$(node -p 'try{require("./node_modules/webgpu/package.json").version}catch{""}' 2>/dev/null)" != "0.6.2" ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi

# The mirror this machine's apt already uses for Debian's main archive (the entry that
# serves the `bookworm` suite itself), so that no mirror is named here: one-line
# sources (`deb [opts] URI bookworm ...`) and deb822 ones (`URIs:` / `Suites:`).
debian_mirror() {
  local f m
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    m="$(awk '$1 == "deb" {
      i = 2
      if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
      if ($(i + 1) == "bookworm") { print $i; exit }
    }' "$f")"
    if [ -n "$m" ]; then echo "$m"; return; fi
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    m="$(awk 'BEGIN { RS = ""; FS = "\n" }
    {
      uri = ""; suites = ""; types = ""; enabled = "yes"
      for (i = 1; i <= NF; i++) {
        line = $i
        if (line ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", line); split(line, u, /[ \t]+/); uri = u[1] }
        else if (line ~ /^Suites:/) { sub(/^Suites:/, "", line); suites = " " line " " }
        else if (line ~ /^Types:/) { sub(/^Types:/, "", line); types = " " line " " }
        else if (line ~ /^Enabled:/) { sub(/^Enabled:[ \t]*/, "", line); enabled = line }
      }
      gsub(/\t/, " ", suites); gsub(/\t/, " ", types)
      if (uri != "" && enabled != "no" && types ~ / deb / && suites ~ / bookworm /) { print uri; exit }
    }' "$f")"
    if [ -n "$m" ]; then echo "$m"; return; fi
  done
}

lvp="$here/mesa/root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
if [ ! -f "$here/mesa/lvp_icd.json" ] || [ ! -f "$lvp" ]; then
  rm -rf mesa
  mkdir -p mesa/apt/sources mesa/apt/lists/partial mesa/apt/cache/archives/partial mesa/debs
  mirror="$(debian_mirror)"
  if [ -z "$mirror" ]; then
    echo "dawn: no Debian bookworm entry in /etc/apt/sources.list{,.d/} to take the mirror from" >&2
    exit 1
  fi
  cat > mesa/apt/sources/backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  # A private apt state: only backports, never the system's sources or lists.
  apt=(-o "Dir::Etc::SourceList=$here/mesa/apt/sources/none.list"
    -o "Dir::Etc::SourceParts=$here/mesa/apt/sources"
    -o "Dir::State::Lists=$here/mesa/apt/lists"
    -o "Dir::Cache=$here/mesa/apt/cache"
    -o "APT::Sandbox::User=root")
  apt-get "${apt[@]}" update -qq
  (cd mesa/debs && apt-get "${apt[@]}" download -qq mesa-vulkan-drivers/bookworm-backports)
  dpkg -x mesa/debs/mesa-vulkan-drivers_*.deb mesa/root
  rm -rf mesa/apt
  test -f "$lvp"
  # The package's own ICD file, with the library named by its absolute path.
  sed "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"$lvp\"|" \
    mesa/root/usr/share/vulkan/icd.d/lvp_icd.json > mesa/lvp_icd.json.tmp
  grep -q "$lvp" mesa/lvp_icd.json.tmp
  mv mesa/lvp_icd.json.tmp mesa/lvp_icd.json
fi
echo "dawn: webgpu $(node -p 'require("./node_modules/webgpu/package.json").version'), lavapipe $(ls mesa/debs)"
