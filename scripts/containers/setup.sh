#!/usr/bin/env bash
# Sets up what the local container layer needs (SANDBOX_BACKEND = "container" under `wrangler dev`
# on this machine's own Docker; docs/containers-local.md), and nothing that is already there:
#
#   1. Debian's docker.io (dockerd 20.10, containerd, runc) and mmdebstrap, via apt-get;
#   2. dockerd, started in the background when `docker info` does not answer;
#   3. the offline base image, a bookworm root filesystem built by mmdebstrap from this machine's
#      own apt sources (no registry has base images for us), tagged by a hash of its recipe, and
#      one such image per other image class (node, rust: src/sandbox/image.rs) with the class's
#      toolchain from Debian's packages too (node-packages.txt, rust-packages.txt);
#   4. the networking sidecar image wrangler 4.86's runtime starts beside each container
#      (crates/container-sidecar, built on the host, FROM the base image), tagged by a hash;
#   5. .sluice/containers/env: what the harness and `npm start` pass to wrangler
#      (WRANGLER_DOCKER_BIN = scripts/containers/docker-wrapper.sh, the sidecar image, the base
#      and class images).
#
# Idempotent; runs as root with no stdin (CI=true). Prints each thing it did or found.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../env.sh"
cd "$ROOT"

readonly HERE="$ROOT/scripts/containers"
readonly STATE="$ROOT/.sluice/containers"
readonly WRAPPER="$HERE/docker-wrapper.sh"
readonly PACKAGES_FILE="$HERE/base-packages.txt"
readonly SIDECAR_DOCKERFILE="$HERE/Dockerfile.sidecar"
readonly BASE_REPO=sluice-base
readonly SIDECAR_REPO=sluice-sidecar
# The tag Dockerfile.local builds FROM by default; always moved to the current base image.
readonly BASE_ALIAS="$BASE_REPO:local"
readonly DOCKERD_LOG=/var/log/sluice-dockerd.log
# Docker's own default bridge address, given explicitly: only then does dockerd 20.10 report the
# gateway in `docker network inspect bridge`, which wrangler 4.86's runtime reads to bind the
# egress listener it hands the sidecar (an empty gateway fails every container start), and
# which the harness reads to put the GitHub stand-in where containers reach the host.
readonly BRIDGE_CIDR=172.17.0.1/16
# Bumped when the way the base image is built changes (not its package list, which is hashed).
readonly BASE_RECIPE=mmdebstrap-minbase-v1

# dockerd answers `docker info` 1-3 s after start here; 60 s covers a loaded 2-core CI machine
# (first start also creates /var/lib/docker and the bridge) and still fails a daemon that cannot
# start instead of waiting forever.
readonly DOCKERD_READY_TIMEOUT_S=60
readonly DOCKERD_POLL_S=0.5
# Another apt or dpkg (e.g. a concurrent install) holds the lock: wait this long for it rather
# than fail at once, but never hang a CI run on a stuck one.
readonly APT_LOCK_TIMEOUT_S=300
# mmdebstrap took ~45 s here (it downloads ~100 packages); 15 minutes allows a slow mirror and
# still ends a hung download.
readonly MMDEBSTRAP_TIMEOUT_S=900
# Building the sidecar image is a COPY onto the base (seconds); the bound ends a wedged daemon.
readonly IMAGE_BUILD_TIMEOUT_S=300
# `cargo build --release` of the std-only sidecar: seconds warm, under a minute cold.
readonly CARGO_BUILD_TIMEOUT_S=900

say() { printf 'containers/setup: %s\n' "$*"; }
die() { printf 'containers/setup: error: %s\n' "$*" >&2; exit 1; }

# Seconds since the script started, for the closing line.
readonly STARTED_AT="$(date +%s)"

require_root() {
  [[ "$(id -u)" == 0 ]] || die "must run as root (apt-get, dockerd); found uid $(id -u)"
}

# The installed version of a package per `apt-cache policy`, or nothing.
installed_version() {
  apt-cache policy "$1" 2>/dev/null | awk '/Installed:/ { if ($2 != "(none)") print $2; exit }'
}

candidate_version() {
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { if ($2 != "(none)") print $2; exit }'
}

install_packages() {
  local wanted=(docker.io mmdebstrap) missing=() pkg
  for pkg in "${wanted[@]}"; do
    local have
    have="$(installed_version "$pkg")"
    if [[ -n "$have" ]]; then
      say "$pkg $have installed"
    else
      missing+=("$pkg")
    fi
  done
  ((${#missing[@]})) || return 0
  for pkg in "${missing[@]}"; do
    if [[ -z "$(candidate_version "$pkg")" ]]; then
      say "no candidate for $pkg in the package lists; running apt-get update"
      apt-get update -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT_S"
      break
    fi
  done
  say "installing ${missing[*]} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT_S" "${missing[@]}" </dev/null
}

docker_answers() {
  "$WRAPPER" info >/dev/null 2>&1
}

start_dockerd() {
  if docker_answers; then
    say "dockerd answers ($("$WRAPPER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    return
  fi
  command -v dockerd >/dev/null || die "dockerd not found after installing docker.io"
  say "starting dockerd in the background (log: $DOCKERD_LOG)"
  # Its own session: the caller's process group (a test harness) may be killed as a whole, and
  # the daemon must outlive it.
  setsid dockerd --bip "$BRIDGE_CIDR" >>"$DOCKERD_LOG" 2>&1 </dev/null &
  local deadline=$((SECONDS + DOCKERD_READY_TIMEOUT_S))
  until docker_answers; do
    if ((SECONDS >= deadline)); then
      tail -n 30 "$DOCKERD_LOG" >&2 || true
      die "dockerd did not answer 'docker info' within ${DOCKERD_READY_TIMEOUT_S} s"
    fi
    sleep "$DOCKERD_POLL_S"
  done
  say "dockerd ready after $((SECONDS - deadline + DOCKERD_READY_TIMEOUT_S)) s"
}

# The gateway of Docker's default bridge, or nothing when the daemon does not report one.
bridge_gateway() {
  "$WRAPPER" network inspect bridge --format '{{range .IPAM.Config}}{{.Gateway}} {{end}}' 2>/dev/null |
    tr ' ' '\n' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' | head -n1 || true
}

require_bridge_gateway() {
  local gateway
  gateway="$(bridge_gateway)"
  [[ -n "$gateway" ]] || die "Docker's bridge network reports no gateway; restart dockerd with --bip $BRIDGE_CIDR (see docs/containers-local.md)"
  say "Docker bridge gateway $gateway"
}

image_exists() {
  "$WRAPPER" image inspect "$1" >/dev/null 2>&1
}

# The machine's apt source files that carry this release's Debian archive (by suite), so the
# root filesystem comes from the same mirrors apt uses here; third-party repositories (other
# suites) are left out.
debian_source_files() {
  local codename="$1" file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    if grep -Eq "^[[:space:]]*Suites:.*[[:space:]]$codename([[:space:]]|$)" "$file" ||
      grep -Eq "^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+[[:space:]]+$codename[[:space:]]" "$file"; then
      printf '%s\n' "$file"
    fi
  done
}

# Builds (unless present) the offline image of one image class: mmdebstrap's minbase with the
# base packages plus the class's own, tagged <repo>:<hash of the recipe>, and prints that tag.
# Further package files after the first are the class's own (scripts/containers/<class>-packages.txt).
build_rootfs_image() {
  local repo="$1" codename packages hash tag
  shift
  codename="$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")"
  [[ -n "$codename" ]] || die "cannot read VERSION_CODENAME from /etc/os-release"
  packages="$(cat "$@" | grep -Ev '^[[:space:]]*(#|$)' | tr -d ' ' | paste -sd, -)"
  [[ -n "$packages" ]] || die "no packages in $*"
  hash="$(printf '%s\n%s\n%s\n' "$BASE_RECIPE" "$codename" "$packages" | sha256sum | cut -c1-12)"
  tag="$repo:$hash"
  if image_exists "$tag"; then
    say "image $tag present ($codename: $packages)" >&2
  else
    local sources=()
    mapfile -t sources < <(debian_source_files "$codename")
    ((${#sources[@]})) || die "no apt source file on this machine carries suite '$codename'"
    local tarball="$STATE/${repo}-rootfs.tar" started=$SECONDS
    say "building image $tag: mmdebstrap $codename minbase + $packages from ${sources[*]}" >&2
    rm -f "$tarball"
    timeout "$MMDEBSTRAP_TIMEOUT_S" mmdebstrap --quiet --variant=minbase --include="$packages" \
      --format=tar "$codename" "$tarball" "${sources[@]}" </dev/null >&2 ||
      die "mmdebstrap failed or took over ${MMDEBSTRAP_TIMEOUT_S} s"
    "$WRAPPER" import --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
    rm -f "$tarball"
    say "image $tag built in $((SECONDS - started)) s" >&2
  fi
  printf '%s\n' "$tag"
}

build_base_image() {
  BASE_IMAGE="$(build_rootfs_image "$BASE_REPO" "$PACKAGES_FILE")"
  "$WRAPPER" tag "$BASE_IMAGE" "$BASE_ALIAS"
}

# The image classes other than base (src/sandbox/image.rs), each the base packages plus its own
# toolchain's Debian packages: what its production Dockerfile gets from the official image.
build_class_images() {
  NODE_IMAGE="$(build_rootfs_image sluice-node "$PACKAGES_FILE" "$HERE/node-packages.txt")"
  RUST_IMAGE="$(build_rootfs_image sluice-rust "$PACKAGES_FILE" "$HERE/rust-packages.txt")"
}

build_sidecar_image() {
  local bin="$ROOT/target/release/sluice-container-sidecar" context="$STATE/sidecar-context" hash tag
  say "cargo build --release -p sluice-container-sidecar"
  timeout "$CARGO_BUILD_TIMEOUT_S" cargo build --quiet --release -p sluice-container-sidecar ||
    die "building the sidecar failed or took over ${CARGO_BUILD_TIMEOUT_S} s"
  hash="$( { sha256sum <"$bin"; sha256sum <"$SIDECAR_DOCKERFILE"; printf '%s\n' "$BASE_IMAGE"; } | sha256sum | cut -c1-12)"
  tag="$SIDECAR_REPO:$hash"
  SIDECAR_IMAGE="$tag"
  if image_exists "$tag"; then
    say "sidecar image $tag present"
    return
  fi
  rm -rf "$context" && mkdir -p "$context"
  cp "$bin" "$context/"
  say "building sidecar image $tag"
  timeout "$IMAGE_BUILD_TIMEOUT_S" "$WRAPPER" build --quiet --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$tag" -f "$SIDECAR_DOCKERFILE" "$context" >/dev/null ||
    die "building the sidecar image failed or took over ${IMAGE_BUILD_TIMEOUT_S} s"
}

# Earlier builds of our two images (other hashes) are only disk space: remove them. One still
# used by a container stays (docker refuses), which is fine.
prune_old_images() {
  local ref
  while read -r ref; do
    [[ "$ref" == "$BASE_IMAGE" || "$ref" == "$BASE_ALIAS" || "$ref" == "$SIDECAR_IMAGE" ||
       "$ref" == "$NODE_IMAGE" || "$ref" == "$RUST_IMAGE" ]] && continue
    if "$WRAPPER" rmi "$ref" >/dev/null 2>&1; then
      say "removed old image $ref"
    fi
  done < <("$WRAPPER" images --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO" 2>/dev/null
           "$WRAPPER" images --format '{{.Repository}}:{{.Tag}}' "$SIDECAR_REPO" 2>/dev/null
           "$WRAPPER" images --format '{{.Repository}}:{{.Tag}}' sluice-node 2>/dev/null
           "$WRAPPER" images --format '{{.Repository}}:{{.Tag}}' sluice-rust 2>/dev/null)
}

write_env() {
  local env_file="$STATE/env"
  cat >"$env_file.tmp" <<EOF
# Written by scripts/containers/setup.sh: the environment of the local container layer.
WRANGLER_DOCKER_BIN="$WRAPPER"
MINIFLARE_CONTAINER_EGRESS_IMAGE="$SIDECAR_IMAGE"
SLUICE_BASE_IMAGE="$BASE_IMAGE"
SLUICE_NODE_IMAGE="$NODE_IMAGE"
SLUICE_RUST_IMAGE="$RUST_IMAGE"
EOF
  mv "$env_file.tmp" "$env_file"
  say "wrote $env_file"
}

require_root
mkdir -p "$STATE"
chmod +x "$WRAPPER"
install_packages
start_dockerd
require_bridge_gateway
build_base_image
build_class_images
build_sidecar_image
prune_old_images
write_env
say "done in $(($(date +%s) - STARTED_AT)) s (base $BASE_IMAGE, sidecar $SIDECAR_IMAGE)"
