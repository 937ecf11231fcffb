#!/usr/bin/env bash
# Build the browser page and serve it on http://127.0.0.1:PORT/ (default 8000): open
# that address in Safari, Chrome or Firefox. Needs the wasm32 target and the
# wasm-bindgen CLI at the version pinned in Cargo.toml; both are installed here when
# missing. `--build-only DIR` builds the site into DIR and serves nothing (the test's
# use). Chromium on Linux needs --enable-unsafe-webgpu for a WebGPU adapter.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
port="${PORT:-8000}"
site="$here/target/site"
serve=1
if [ "${1:-}" = "--build-only" ]; then
  site="$2"
  serve=0
fi
version="$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' "$here/Cargo.toml")"
rustup target list --installed | grep -qx wasm32-unknown-unknown ||
  rustup target add wasm32-unknown-unknown
if [ "$(wasm-bindgen --version 2>/dev/null | cut -d' ' -f2)" != "$version" ]; then
  cargo install wasm-bindgen-cli --version "$version"
fi
target_dir="${CARGO_TARGET_DIR:-$here/target}"
cargo build --manifest-path "$here/Cargo.toml" --target wasm32-unknown-unknown \
  --release --target-dir "$target_dir"
mkdir -p "$site"
wasm-bindgen --target web --no-typescript --out-dir "$site/pkg" \
  "$target_dir/wasm32-unknown-unknown/release/deltatape_page.wasm"
cp "$here/index.html" "$site/"
if [ "$serve" = 1 ]; then
  echo "serving $site on http://127.0.0.1:$port/ (Ctrl-C stops)"
  cd "$site" && exec python3 -m http.server "$port" --bind 127.0.0.1
fi
