// The local container layer (docs/containers-local.md): what a stack needs to run
// SANDBOX_BACKEND = "container" under `wrangler dev` on this machine's Docker. Used by
// tools/stack/stack.mjs (startStack({ containers: true })).
//
// prepareContainerLayer() runs scripts/containers/setup.sh (packages, dockerd, base and sidecar
// images), builds the agent for the image, stages it as the image's build context, and writes
// wrangler.containers.toml, generated from wrangler.toml so the two never drift apart.

import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT, readEnvFile } from './env.mjs';
import { runBounded } from './process.mjs';

const execFileAsync = promisify(execFile);

export const CONTAINERS_STATE_DIR = join(ROOT, '.sluice', 'containers');
export const CONTAINERS_ENV_FILE = join(CONTAINERS_STATE_DIR, 'env');
export const CONTAINERS_CONFIG = join(ROOT, 'wrangler.containers.toml');
// The agent image's whole build context: the agent binary and nothing else (Dockerfile.local).
const AGENT_CONTEXT_DIR = join(CONTAINERS_STATE_DIR, 'agent-context');
const AGENT_RELEASE_BIN = join(ROOT, 'target', 'release', 'sluice-sandbox-agent');
// What every container of the Worker is named by the runtime: workerd-<worker>-<class>-<id>,
// and its networking sidecar the same with `-proxy` appended. Every sandbox class is named
// Sandbox<...> (SandboxContainer, SandboxNode, SandboxRustStandard2, ...: wrangler.toml).
export const SANDBOX_CONTAINER_PREFIX = 'workerd-sluice-Sandbox';

// setup.sh on a cold machine: apt installs (~20 s here), mmdebstrap (~35-45 s), a release build
// of the sidecar; 30 minutes allows a slow mirror and a cold cargo cache on a loaded CI machine.
const SETUP_TIMEOUT_MS = 30 * 60_000;
// A release build of the agent: ~1 minute cold on 2 cores, seconds warm.
const AGENT_BUILD_TIMEOUT_MS = 15 * 60_000;
// One docker CLI call (inspect, ps, rm of a few containers): milliseconds to a second or two.
const DOCKER_CALL_TIMEOUT_MS = 60_000;
// A container's log kept for a post-mortem: the agent logs one line per request, so 16 MiB is
// far more than a test run writes, and bounds memory if something floods it.
const CONTAINER_LOG_BYTES_MAX = 16 * 1024 * 1024;

let prepared = null;

// Once per process: set up the machine, stage the agent, write the config. Resolves to
// { env, config, gateway, docker } where env is what wrangler needs on top of its usual env.
export function prepareContainerLayer() {
  prepared ??= (async () => {
    await runBounded('bash', [join(ROOT, 'scripts', 'containers', 'setup.sh')], {
      label: 'scripts/containers/setup.sh', timeoutMs: SETUP_TIMEOUT_MS, stdio: 'pipe', env: { CI: 'true' },
    });
    const vars = readEnvFile(CONTAINERS_ENV_FILE);
    for (const name of ['WRANGLER_DOCKER_BIN', 'MINIFLARE_CONTAINER_EGRESS_IMAGE', ...Object.values(CLASS_IMAGE_VARS)]) {
      if (!vars[name]) throw new Error(`${CONTAINERS_ENV_FILE} has no ${name}; run scripts/containers/setup.sh`);
    }
    await runBounded('cargo', ['build', '--release', '-p', 'sluice-sandbox-agent'], {
      label: 'cargo build --release -p sluice-sandbox-agent', timeoutMs: AGENT_BUILD_TIMEOUT_MS, stdio: 'pipe',
    });
    rmSync(AGENT_CONTEXT_DIR, { recursive: true, force: true });
    mkdirSync(AGENT_CONTEXT_DIR, { recursive: true });
    copyFileSync(AGENT_RELEASE_BIN, join(AGENT_CONTEXT_DIR, 'sluice-sandbox-agent'));
    const images = Object.fromEntries(Object.entries(CLASS_IMAGE_VARS).map(([klass, name]) => [klass, vars[name]]));
    writeFileSync(CONTAINERS_CONFIG, containersConfig(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'), images));
    const docker = vars.WRANGLER_DOCKER_BIN;
    return {
      docker,
      maxInstances: maxInstances(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')),
      config: CONTAINERS_CONFIG,
      gateway: await bridgeGateway(docker),
      env: {
        WRANGLER_DOCKER_BIN: docker,
        MINIFLARE_CONTAINER_EGRESS_IMAGE: vars.MINIFLARE_CONTAINER_EGRESS_IMAGE,
      },
    };
  })();
  return prepared;
}

// The offline image each image class's local agent image builds FROM (scripts/containers/setup.sh
// writes them to CONTAINERS_ENV_FILE), by the class its production Dockerfile names:
// `Dockerfile` is `base`, `Dockerfile.<class>` is <class> (src/sandbox/image.rs).
export const CLASS_IMAGE_VARS = { base: 'SLUICE_BASE_IMAGE', node: 'SLUICE_NODE_IMAGE', rust: 'SLUICE_RUST_IMAGE' };

const IMAGE_LINE = /^image = "\.\/crates\/sandbox-agent\/Dockerfile(?:\.([a-z0-9-]+))?"$/;
const CONTEXT_LINE = /^image_build_context = "\."$/;

// wrangler.toml with containers on and every [[containers]] class's agent image built locally:
// Dockerfile.local FROM its class's offline image. Every [[containers]] entry must have exactly
// one image line and one build context line, so a changed wrangler.toml fails loudly here
// instead of silently running the process backend.
export function containersConfig(text, images) {
  const dev = /^enable_containers = false$/m;
  if ((text.match(new RegExp(dev.source, 'gm')) ?? []).length !== 1) {
    throw new Error(`wrangler.toml: expected one line matching ${dev}`);
  }
  const entries = (text.match(/^\[\[containers\]\]$/gm) ?? []).length;
  let imagesSeen = 0;
  let contexts = 0;
  let image = null;
  let className = null;
  const lines = text.replace(dev, 'enable_containers = true').split('\n').map((line) => {
    className = /^class_name = "([A-Za-z0-9]+)"$/.exec(line)?.[1] ?? className;
    const found = IMAGE_LINE.exec(line);
    if (found) {
      imagesSeen += 1;
      const klass = found[1] ?? 'base';
      image = images[klass];
      if (!image) throw new Error(`wrangler.toml: no local image for class ${klass} (${CLASS_IMAGE_VARS[klass] ?? 'unknown class'})`);
      return 'image = "./crates/sandbox-agent/Dockerfile.local"';
    }
    if (CONTEXT_LINE.test(line)) {
      if (!image) throw new Error('wrangler.toml: image_build_context before its image line');
      contexts += 1;
      // The class as a label makes each class's image distinct: wrangler dev removes every other
      // cloudflare-dev tag of an image it built, so two classes built alike (node on basic and on
      // standard-1) would leave only the last one's tag, and the other's containers could not start.
      const vars = `image_vars = { BASE_IMAGE = "${image}", CONTAINER_CLASS = "${className}" }`;
      image = null;
      return `image_build_context = "./.sluice/containers/agent-context"\n${vars}`;
    }
    return line;
  });
  if (entries < 1 || imagesSeen !== entries || contexts !== entries) {
    throw new Error(`wrangler.toml: expected one Dockerfile image line and one image_build_context = "." per [[containers]] entry (${entries}), found ${imagesSeen} and ${contexts}`);
  }
  return `# Generated from wrangler.toml by tools/stack/containers.mjs for the local container layer\n# (docs/containers-local.md). Do not edit: edit wrangler.toml.\n${lines.join('\n')}`;
}

// `max_instances` of wrangler.toml's [[containers]] entries (one per image class and instance
// type, each the same): the most sandbox containers of one class at once. The pool
// (POOL_CAPACITY, default 8) must admit no more runs than that, since each admitted run holds one
// container; tests/container_lifecycle.rs checks wrangler.toml itself, and checkPoolCapacity()
// the vars a stack runs with.
export function maxInstances(wranglerToml) {
  const found = [...wranglerToml.matchAll(/^max_instances = (\d+)$/gm)].map((m) => Number(m[1]));
  if (found.length === 0) throw new Error('wrangler.toml: no max_instances line');
  return Math.min(...found);
}

// Refuses vars whose POOL_CAPACITY exceeds max_instances (the pool would admit a run whose
// container cannot start).
export function checkPoolCapacity(vars, max) {
  if (vars?.POOL_CAPACITY === undefined) return;
  const pool = Number(vars.POOL_CAPACITY);
  if (!Number.isInteger(pool) || pool > max) {
    throw new Error(`POOL_CAPACITY=${vars.POOL_CAPACITY} must be an integer at most max_instances (${max}) of wrangler.toml`);
  }
}

export async function docker(dockerBin, args) {
  const { stdout } = await execFileAsync(dockerBin, args, { timeout: DOCKER_CALL_TIMEOUT_MS, encoding: 'utf8' });
  return stdout.trim();
}

// The host's address on Docker's default bridge: where a container reaches a server on the host.
export async function bridgeGateway(dockerBin) {
  const gateway = await docker(dockerBin, ['network', 'inspect', 'bridge', '--format', '{{range .IPAM.Config}}{{.Gateway}} {{end}}']);
  const ipv4 = gateway.split(/\s+/).find((g) => /^\d+\.\d+\.\d+\.\d+$/.test(g));
  if (!ipv4) throw new Error(`Docker's bridge network has no IPv4 gateway (${JSON.stringify(gateway)})`);
  return ipv4;
}

// Names of the Worker's sandbox containers (and their sidecars), running or not.
export async function sandboxContainers(dockerBin) {
  const out = await docker(dockerBin, ['ps', '-a', '--filter', `name=${SANDBOX_CONTAINER_PREFIX}`, '--format', '{{.Names}}']);
  return out ? out.split('\n') : [];
}

// A container's stdout and stderr, interleaved as Docker stored them.
export async function containerLogs(dockerBin, name) {
  const { stdout, stderr } = await execFileAsync(dockerBin, ['logs', '--timestamps', name], {
    timeout: DOCKER_CALL_TIMEOUT_MS, encoding: 'utf8', maxBuffer: CONTAINER_LOG_BYTES_MAX,
  });
  return stdout + stderr;
}

export async function removeContainers(dockerBin, names) {
  if (names.length) await docker(dockerBin, ['rm', '--force', ...names]);
}
