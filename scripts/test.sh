#!/usr/bin/env bash
# `npm test`: every test layer, in order of cost. Native Rust tests (engine, store on real SQLite,
# sandbox agent), then one Worker build, then end-to-end tests that run the built Worker under
# `wrangler dev` against the GitHub stand-in and the sandbox agent. Stops at the first failure.
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

sluice_header "all tests passed"
