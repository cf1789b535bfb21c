#!/usr/bin/env bash
# Installs what building and testing Sluice needs, and nothing that is already there: the wasm32
# target, worker-build, wasm-bindgen-cli at the version Cargo.lock pins, and node_modules.
# Everything comes from package registries (crates.io, npm); nothing from a release page.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

readonly WORKER_BUILD_VERSION=0.8.7
readonly NODE_MAJOR_MIN=20
readonly WASM_TARGET=wasm32-unknown-unknown
# Hash of the package-lock.json node_modules was installed from; a different hash means `npm ci`.
readonly NPM_STAMP="$ROOT/node_modules/.sluice-package-lock.sha256"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

require_tools() {
  local tool
  for tool in rustup cargo node npm git; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed or not on PATH (PATH=$PATH)"
  done
  local major
  major="$(node -p 'process.versions.node.split(".")[0]')"
  ((major >= NODE_MAJOR_MIN)) || die "Node $NODE_MAJOR_MIN or newer is required, found $(node --version)"
}

# First semver in a tool's --version output, or nothing when the tool is absent.
tool_version() {
  "$@" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1 || true
}

# Version of the `wasm-bindgen` package in Cargo.lock: the `version` line of its [[package]] block.
locked_wasm_bindgen_version() {
  awk '
    /^\[\[package\]\]/ { in_block = 0 }
    /^name = "wasm-bindgen"$/ { in_block = 1; next }
    in_block && /^version = / { gsub(/"/, "", $3); print $3; exit }
  ' Cargo.lock
}

install_node_modules() {
  local want have=""
  want="$(sha256sum package-lock.json | cut -d' ' -f1)"
  [[ -f "$NPM_STAMP" ]] && have="$(cat "$NPM_STAMP")"
  if [[ -d node_modules && -x node_modules/.bin/wrangler && "$have" == "$want" ]]; then
    say "node_modules matches package-lock.json"
    return
  fi
  say "installing node_modules (npm ci)"
  npm ci --no-audit --no-fund
  printf '%s\n' "$want" >"$NPM_STAMP"
}

add_wasm_target() {
  if rustup target list --installed | grep -qx "$WASM_TARGET"; then
    say "rust target $WASM_TARGET present"
    return
  fi
  say "adding rust target $WASM_TARGET"
  rustup target add "$WASM_TARGET"
}

install_worker_build() {
  local have
  have="$(tool_version worker-build)"
  if [[ "$have" == "$WORKER_BUILD_VERSION" ]]; then
    say "worker-build $have present"
    return
  fi
  say "installing worker-build $WORKER_BUILD_VERSION (found: ${have:-none}); takes ~5 minutes"
  cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked --force
}

install_wasm_bindgen() {
  [[ -f Cargo.lock ]] || { say "Cargo.lock missing; generating it"; cargo generate-lockfile; }
  local want have
  want="$(locked_wasm_bindgen_version)"
  [[ -n "$want" ]] || die "no wasm-bindgen package in Cargo.lock"
  have="$(tool_version wasm-bindgen)"
  if [[ "$have" == "$want" ]]; then
    say "wasm-bindgen $have present (matches Cargo.lock)"
    return
  fi
  # No --locked: the CLI's own lockfile references a yanked/missing crate version (index gap).
  say "installing wasm-bindgen-cli $want (found: ${have:-none}); takes ~5 minutes"
  cargo install wasm-bindgen-cli --version "$want" --force
}

# The browser the dashboard's end-to-end test drives (tests/e2e/dashboard.test.mjs, through
# playwright-core with executablePath): Debian's own chromium package, since playwright's browser
# downloads come from a release page. Installed when missing and we are root (CI is); otherwise the
# test says what to install. SLUICE_CHROMIUM names another binary.
install_chromium() {
  if [[ -n "${SLUICE_CHROMIUM:-}" ]] || command -v chromium >/dev/null 2>&1; then
    say "chromium present ($(command -v chromium || echo "$SLUICE_CHROMIUM"))"
    return
  fi
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    say "chromium missing: install Debian's 'chromium' package (the dashboard's e2e test needs it)"
    return
  fi
  say "installing chromium (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
}

require_tools
install_node_modules
install_chromium
add_wasm_target
install_worker_build
install_wasm_bindgen
say "done"
