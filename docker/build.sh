#!/usr/bin/env bash
# Build a deploykit image: docker/build.sh [cpu|cuda] [TAG]. Uses podman (with runc) or docker,
# whichever runs here (CONTAINER_ENGINE=podman|docker chooses). Where the official base image cannot be
# pulled (no registry), the CPU image's base is made from Debian's packages instead: bookworm with its
# Python 3.11, the same Debian and Python as python:3.11-slim-bookworm. Every failing step says which
# step failed; exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-cpu}
tag=${2:-localhost/deploykit:$flavour}
official_base=python:3.11-slim-bookworm
local_base=localhost/deploykit-base:bookworm

fail() { echo "docker/build.sh: $*" >&2; exit 1; }

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
    if command -v podman >/dev/null; then engine=podman; elif command -v docker >/dev/null; then engine=docker; fi
fi
[ -n "$engine" ] || fail "no container engine: install podman (apt-get install podman buildah runc) or docker."
command -v "$engine" >/dev/null || fail "CONTAINER_ENGINE=$engine is not installed."
engine_cmd=("$engine")
# crun cannot start containers under mixed cgroup v1/v2 mounts; runc can
if [ "$engine" = podman ] && command -v runc >/dev/null; then engine_cmd+=(--runtime runc); fi

build_args=(--network host)
bundle=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
# a build-time mount is podman's: docker build has no --volume, so a docker build behind such a proxy
# needs the CA some other way (a BuildKit secret)
if [ "$engine" = podman ] && [ -f "$bundle" ]; then
    build_args+=(--volume "$bundle:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi

base_args=()
if [ "$flavour" = cpu ]; then
    if "${engine_cmd[@]}" image inspect "$official_base" >/dev/null 2>&1 \
        || "${engine_cmd[@]}" pull -q "$official_base" >/dev/null 2>&1; then
        echo "base: $official_base"
    else
        if ! "${engine_cmd[@]}" image inspect "$local_base" >/dev/null 2>&1; then
            command -v mmdebstrap >/dev/null \
                || fail "step 'base image': $official_base cannot be pulled and mmdebstrap (apt-get install mmdebstrap) is missing to make one."
            echo "base: $official_base cannot be pulled; making $local_base from Debian bookworm (mmdebstrap)"
            rootfs=$(mktemp --suffix=.tar)
            trap 'rm -f "$rootfs"' EXIT
            mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates,passwd,libgomp1 \
                bookworm "$rootfs" \
                || fail "step 'base image': mmdebstrap could not make a bookworm root file system (no apt access?)."
            "${engine_cmd[@]}" import "$rootfs" "$local_base" >/dev/null \
                || fail "step 'base image': $engine could not import the root file system."
        fi
        base_args=(--build-arg "PYTHON_IMAGE=$local_base")
    fi
elif [ "$flavour" != cuda ]; then
    fail "unknown flavour '$flavour'; expected cpu or cuda (docker/*.Dockerfile)."
fi

started=$(date +%s)
"${engine_cmd[@]}" build "${build_args[@]}" "${base_args[@]}" -f "docker/$flavour.Dockerfile" -t "$tag" . \
    || fail "step 'build': $engine build of docker/$flavour.Dockerfile failed (its output is above)."
size=$("${engine_cmd[@]}" image inspect --format '{{.Size}}' "$tag")
echo "built $tag in $(( $(date +%s) - started )) s: $(( size / 1000000 )) MB"
