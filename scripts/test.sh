#!/usr/bin/env bash
# `npm test`: every test layer, in order of cost. Native Rust tests (engine, store on real SQLite,
# sandbox agent), then one Worker build, then end-to-end tests that run the built Worker under
# `wrangler dev` against the GitHub stand-in and the sandbox agent, then the same inside real
# containers (tests/e2e-containers/, docs/containers-local.md) when this machine can run them:
# as root, with scripts/containers/setup.sh succeeding (it installs Docker from apt, starts
# dockerd and builds the images offline). Otherwise that layer is skipped and the reason printed;
# SLUICE_SKIP_CONTAINERS=1 skips it on purpose. Stops at the first failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

sluice_header "setup"
bash scripts/setup.sh

sluice_header "native tests (cargo test --workspace)"
cargo test --workspace

sluice_header "build (Worker + sandbox agent)"
bash scripts/build.sh

# Built once above; the e2e harness must not build again.
sluice_header "end-to-end tests (node --test)"
SLUICE_PREBUILT=1 node --test --test-concurrency=1 tests/e2e/ tools/github-standin/

# Why the container layer cannot run here, or nothing when it can (setup.sh has then run).
containers_unavailable() {
  if [[ "${SLUICE_SKIP_CONTAINERS:-}" == 1 ]]; then
    echo "SLUICE_SKIP_CONTAINERS=1"
  elif [[ "$(id -u)" != 0 ]]; then
    echo "not root (uid $(id -u)): the layer installs docker.io and starts dockerd"
  elif ! CI=true bash scripts/containers/setup.sh </dev/null >&2; then
    echo "scripts/containers/setup.sh failed (its output is above)"
  fi
}

sluice_header "end-to-end tests inside containers (node --test)"
containers_started=$SECONDS
skipped="$(containers_unavailable)"
if [[ -n "$skipped" ]]; then
  printf 'SKIPPED the container layer (tests/e2e-containers/): %s\n' "$skipped"
else
  SLUICE_PREBUILT=1 node --test --test-concurrency=1 tests/e2e-containers/
  printf 'container layer: %s s (setup included)\n' "$((SECONDS - containers_started))"
fi

sluice_header "all tests passed"
