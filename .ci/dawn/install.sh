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

lvp="$here/mesa/root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
if [ ! -f "$here/mesa/lvp_icd.json" ] || [ ! -f "$lvp" ]; then
  rm -rf mesa
  mkdir -p mesa/apt/sources mesa/apt/lists/partial mesa/apt/cache/archives/partial mesa/debs
  cat > mesa/apt/sources/backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
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
