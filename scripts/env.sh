# shellcheck shell=bash
# Sourced by the other scripts in scripts/: one place for the repository root, the tool paths and
# the environment that keeps wrangler offline and inside the project.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT

# `cargo install` puts worker-build and wasm-bindgen here; put it first so the versions setup.sh
# checks are the ones the build uses.
CARGO_BIN="${CARGO_HOME:-${HOME:-/root}/.cargo}/bin"
export CARGO_BIN
case ":$PATH:" in
  *":$CARGO_BIN:"*) ;;
  *) export PATH="$CARGO_BIN:$PATH" ;;
esac

# worker-build downloads these three tools from release pages unless pointed at local binaries;
# those downloads fail on machines that only reach package registries.
if [[ -x "$CARGO_BIN/wasm-bindgen" ]]; then
  WASM_BINDGEN_BIN="$CARGO_BIN/wasm-bindgen"
else
  WASM_BINDGEN_BIN="$(command -v wasm-bindgen || true)"
fi
export WASM_BINDGEN_BIN
export ESBUILD_BIN="$ROOT/node_modules/.bin/esbuild"
export WASM_OPT_BIN="$ROOT/node_modules/.bin/wasm-opt"

# Wrangler: no telemetry, no request to Cloudflare for request.cf data, and its config and logs in
# the project instead of the user's home directory.
export WRANGLER_SEND_METRICS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false
export XDG_CONFIG_HOME="$ROOT/.wrangler/config"
export WRANGLER_LOG_PATH="$ROOT/.wrangler/logs"
mkdir -p "$XDG_CONFIG_HOME" "$WRANGLER_LOG_PATH"

# Prints a visible section header (used by test.sh and setup.sh).
sluice_header() {
  printf '\n==== %s ====\n' "$*"
}
