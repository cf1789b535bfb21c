#!/usr/bin/env bash
# The docker that wrangler runs for the local container layer (WRANGLER_DOCKER_BIN; see
# docs/containers-local.md). It passes everything to the real docker CLI except:
#
# - `build`: wrangler asks for `docker build --load ... --provenance=false`, flags of BuildKit's
#   buildx, which Debian 12 does not package. Both are dropped, and the classic builder is
#   asked for (DOCKER_BUILDKIT=0); it loads the image into the daemon anyway.
# - `pull IMAGE` of an image the daemon already has: nothing is pulled (there is no registry
#   here, and wrangler pulls its networking sidecar image before every start). An image that is
#   not local is pulled as usual, and fails here as it would without the wrapper.
#
# The real docker: $SLUICE_REAL_DOCKER, else Debian's /usr/bin/docker (the CLI packaged with the
# daemon), else the first `docker` on PATH.
set -euo pipefail

self="$(readlink -f "${BASH_SOURCE[0]}")"
real="${SLUICE_REAL_DOCKER:-}"
if [[ -z "$real" ]]; then
  if [[ -x /usr/bin/docker ]]; then
    real=/usr/bin/docker
  else
    real="$(command -v docker || true)"
  fi
fi
if [[ -z "$real" || "$(readlink -f "$real")" == "$self" ]]; then
  echo "docker-wrapper: no real docker CLI found (set SLUICE_REAL_DOCKER)" >&2
  exit 127
fi

case "${1:-}" in
  build)
    shift
    args=()
    for arg in "$@"; do
      case "$arg" in
        --load | --provenance=false) ;;
        *) args+=("$arg") ;;
      esac
    done
    DOCKER_BUILDKIT=0 exec "$real" build "${args[@]}"
    ;;
  pull)
    # The image is the one argument that is neither a flag nor --platform's value (wrangler
    # runs `docker pull IMAGE --platform linux/amd64`).
    image=""
    skip_next=0
    for arg in "${@:2}"; do
      if ((skip_next)); then
        skip_next=0
      elif [[ "$arg" == --platform ]]; then
        skip_next=1
      elif [[ "$arg" != -* ]]; then
        image="$arg"
        break
      fi
    done
    if [[ -n "$image" ]] && "$real" image inspect "$image" >/dev/null 2>&1; then
      echo "docker-wrapper: $image is a local image; not pulling" >&2
      exit 0
    fi
    exec "$real" "$@"
    ;;
  *)
    exec "$real" "$@"
    ;;
esac
