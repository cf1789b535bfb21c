// The stack harness as one library: start an isolated Sluice stack (the built Worker under
// `wrangler dev`, the sandbox agent or real containers, the GitHub stand-in), sign and send
// webhooks to it, wait on it, stop it. Tests (tests/e2e, tests/e2e-containers) and the scripts
// (bench, soak, demo, start) import it from here; nothing under tools/ imports tests/ or scripts/
// (tests/tidy.rs `tooling_imports_have_no_circle_and_point_down`).
//
//   env.mjs            project paths, wrangler's offline env, env files, keys, the dev layout
//   process.mjs        process groups, bounded commands, ports, polling, log tails
//   agent.mjs          the sandbox agent as a local process
//   containers.mjs     the local container layer (docs/containers-local.md)
//   sandbox-gates.mjs  gated commands in real containers, requests through a sidecar
//   requests.mjs       raw requests, bounded promises, waitFor
//   live.mjs           groups and temp dirs killed/removed when this process dies
//   app.mjs            the stack's GitHub App ids, installation tokens
//   stack.mjs          startStack(): one stack, torn down by stop()
//   stack-api.mjs      the handle startStack() returns

export * from './env.mjs';
export * from './process.mjs';
export * from './agent.mjs';
export * from './containers.mjs';
export * from './sandbox-gates.mjs';
export * from './requests.mjs';
export * from './app.mjs';
export * from './stack.mjs';
