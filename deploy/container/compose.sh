#!/bin/sh
# `docker compose` when a Docker engine answers, podman-compose otherwise (on PATH, or the one
# deploy/container/prepare.sh installs into the project's venv). Arguments go through unchanged:
#   deploy/container/compose.sh up -d      deploy/container/compose.sh -f docker-compose.yml -f docker-compose.hostnet.yml ps
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    exec docker compose "$@"
elif command -v podman-compose >/dev/null 2>&1; then
    exec podman-compose "$@"
elif [ -x "$ROOT/.venv/bin/podman-compose" ]; then
    exec "$ROOT/.venv/bin/podman-compose" "$@"
fi
echo "compose.sh: neither 'docker compose' (with a running engine) nor podman-compose found" >&2
echo "  (pip install podman-compose, or deploy/container/prepare.sh on a machine with no registry)" >&2
exit 127
