#!/usr/bin/env bash
# Builds the Worker (worker-build -> build/) and the local sandbox agent (target/debug), then
# reports the Worker's wasm size, raw and gzipped (Cloudflare's script size limits apply to the
# compressed upload). Extra arguments go to worker-build; SLUICE_FAST_BUILD=1 adds --no-opt
# (skips wasm-opt: ~2 s instead of ~8 s per build, wasm ~20% larger).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

say() { printf 'build: %s\n' "$*"; }

build_worker() {
  local args=(--release)
  [[ "${SLUICE_FAST_BUILD:-}" == 1 ]] && args+=(--no-opt)
  [[ -x "$WASM_BINDGEN_BIN" ]] || { say "wasm-bindgen not found; run 'npm run setup'" >&2; exit 1; }
  say "worker-build ${args[*]} $*"
  worker-build "${args[@]}" "$@"
}

build_agent() {
  say "cargo build -p sluice-sandbox-agent"
  cargo build -p sluice-sandbox-agent
}

report_size() {
  local wasm
  wasm="$(find build -type f -name '*.wasm' | sort | head -n1)"
  if [[ -z "$wasm" ]]; then
    say "no .wasm file under build/" >&2
    exit 1
  fi
  printf 'worker wasm: %s bytes, gzip: %s bytes (%s)\n' \
    "$(wc -c <"$wasm" | tr -d ' ')" "$(gzip -9 -c "$wasm" | wc -c | tr -d ' ')" "$wasm"
}

build_worker "$@"
build_agent
report_size
