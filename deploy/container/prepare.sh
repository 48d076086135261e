#!/bin/sh
# Prepares a machine with no image registry for the compose test (tests/compose/), from Debian and
# PyPI packages only: the container engine (podman + netavark/aardvark-dns/iptables/runc),
# podman-compose in the project's venv, an engine config of our own (CONTAINERS_CONF, /etc untouched),
# a base image built with mmdebstrap (localhost/kbroker-base), an etcd image from Debian's etcd-server
# binary (localhost/kbroker-etcd), a Prometheus image from Debian's prometheus binary
# (localhost/kbroker-prometheus) and the kbroker image itself (localhost/kbroker) from ./Dockerfile.
# Each step is skipped when its result is already there, and timed (seconds on stdout), so a second
# run costs almost nothing. Usage: deploy/container/prepare.sh [STATE_DIR]  (default /var/tmp/kbroker-compose-test)
# It writes `export ...` lines for the variables the compose run needs into STATE_DIR/env.sh.
# STEPS (environment) limits the run to some steps, e.g. STEPS="base-image etcd-image".
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${1:-${TMPDIR:-/var/tmp}/kbroker-compose-test}
VENV=${VENV:-$ROOT/.venv}
SUITE=${DEBIAN_SUITE:-bookworm}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)

step() {  # step NAME COMMAND...: runs COMMAND and prints how long it took
    name=$1; shift
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    printf 'prepare: %-17s %6.1f s\n' "$name" "$(echo "$t1 - $t0" | bc)"
}

need_root() {
    if [ "$(id -u)" != 0 ]; then echo "prepare.sh: run as root (apt-get, podman, mmdebstrap)" >&2; exit 2; fi
}

apt_packages() {
    missing=""
    for p in podman netavark aardvark-dns iptables runc catatonit mmdebstrap etcd-server prometheus kcat bc; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

pip_packages() {
    [ -x "$VENV/bin/podman-compose" ] || "$VENV/bin/pip" install -q podman-compose
}

engine_conf() {
    # The three settings these machines need; podman reads CONTAINERS_CONF instead of /etc/containers.
    cat > "$STATE/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
CONF
}

image_exists() { CONTAINERS_CONF="$STATE/containers.conf" podman image exists "$1"; }

base_image() {
    image_exists localhost/kbroker-base && return 0
    # The system's CA bundle and extra CAs go in, so pip inside image builds trusts what the host trusts.
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"' \
        --customize-hook='for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] && cp "$f" "$1/usr/local/share/ca-certificates/"; done; true' \
        --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
        --customize-hook='rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*' \
        "$SUITE" "$STATE/base.tar"
    CONTAINERS_CONF="$STATE/containers.conf" podman import -q --change 'CMD ["/bin/bash"]' \
        "$STATE/base.tar" localhost/kbroker-base >/dev/null
    rm -f "$STATE/base.tar"
}

etcd_image() {
    image_exists localhost/kbroker-etcd && return 0
    ctx="$STATE/etcd-context"
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp "$(command -v etcd)" "$ctx/etcd"
    printf 'FROM localhost/kbroker-base\nCOPY etcd /usr/bin/etcd\nCMD ["etcd"]\n' > "$ctx/Containerfile"
    CONTAINERS_CONF="$STATE/containers.conf" podman build -q --network none -t localhost/kbroker-etcd \
        -f "$ctx/Containerfile" "$ctx" >/dev/null
    rm -rf "$ctx"
}

prometheus_image() {
    # Stands in for prom/prometheus in the monitoring profile: Debian's binary, the same entrypoint.
    image_exists localhost/kbroker-prometheus && return 0
    ctx="$STATE/prometheus-context"
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp "$(command -v prometheus)" "$ctx/prometheus"
    printf '%s\n' 'FROM localhost/kbroker-base' 'COPY prometheus /bin/prometheus' \
        'RUN mkdir -p /prometheus /etc/prometheus' 'WORKDIR /prometheus' 'ENTRYPOINT ["/bin/prometheus"]' \
        'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]' \
        > "$ctx/Containerfile"
    CONTAINERS_CONF="$STATE/containers.conf" podman build -q --format docker --network none \
        -t localhost/kbroker-prometheus -f "$ctx/Containerfile" "$ctx" >/dev/null
    rm -rf "$ctx"
}

kbroker_image() {
    # Host networking for the build: pip reaches PyPI the way the host does (no bridge here).
    # The docker format keeps the Dockerfile's HEALTHCHECK (OCI images have none). The build stage
    # is tagged too (localhost/kbroker-build) so that its cached dependency layer survives the prune
    # of what a source change replaced (the previous images, now untagged).
    for target in build ""; do
        CONTAINERS_CONF="$STATE/containers.conf" podman build -q --format docker --network host \
            --build-arg BASE_IMAGE=localhost/kbroker-base ${target:+--target "$target"} \
            -t "localhost/kbroker${target:+-$target}" -f "$ROOT/Dockerfile" "$ROOT" >/dev/null
    done
    CONTAINERS_CONF="$STATE/containers.conf" podman image prune -f >/dev/null
}

need_root
T0=$(date +%s.%N)
for s in ${STEPS:-apt-packages pip-packages engine-conf base-image etcd-image prometheus-image kbroker-image}; do
    step "$s" "$(echo "$s" | tr - _)"
done
printf 'prepare: %-17s %6.1f s\n' total "$(echo "$(date +%s.%N) - $T0" | bc)"
cat > "$STATE/env.sh" <<ENV
export CONTAINERS_CONF=$STATE/containers.conf
export BASE_IMAGE=localhost/kbroker-base
export ETCD_IMAGE=localhost/kbroker-etcd
export BROKER_IMAGE=localhost/kbroker
export PROMETHEUS_IMAGE=localhost/kbroker-prometheus
ENV
