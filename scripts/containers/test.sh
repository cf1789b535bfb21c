#!/usr/bin/env bash
# `npm run test:containers`: the end-to-end layer inside real containers (tests/e2e-containers/,
# docs/containers-local.md) on its own; `npm test` runs it too when the machine can (root, setup.sh
# succeeds). It needs root, Docker and ~2.5 GB of images (base, node, rust).
# Sets up the project's toolchain and the container layer, builds the Worker once, then runs the
# tests (or, with --measure, `npm run bench:containers`: the layer's figures).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
cd "$ROOT"

sluice_header "setup"
bash scripts/setup.sh
bash scripts/containers/setup.sh

sluice_header "build (Worker + sandbox agent)"
bash scripts/build.sh

if [[ "${1:-}" == --measure ]]; then
  sluice_header "container layer figures"
  SLUICE_PREBUILT=1 node scripts/bench-containers.mjs
else
  sluice_header "end-to-end tests inside containers (node --test)"
  SLUICE_PREBUILT=1 node --test --test-concurrency=1 tests/e2e-containers/
fi
