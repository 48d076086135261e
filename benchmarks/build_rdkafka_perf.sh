#!/bin/sh
# Build librdkafka's examples/rdkafka_performance (the C client of `make bench`) from Debian's
# librdkafka source package. It is linked against the librdkafka that the venv's confluent-kafka wheel
# bundles when PYTHON (second argument) names an interpreter that has one, so the C client and the
# Python workloads run the same librdkafka (2.x; rpath set, the example only uses the stable public
# API). Otherwise it links against the system's librdkafka-dev: Debian 12's 2.0.2 cannot parse Tansu
# 0.6's ApiVersions v3 response, so the Tansu column of the C-client rows then fails. The version used
# goes into the report either way.
#
#   benchmarks/build_rdkafka_perf.sh benchmarks/build/rdkafka_performance [PYTHON]
#
# Needs root the first time when librdkafka-dev or the deb-src entries are missing: it then adds
# /etc/apt/sources.list.d/kbroker-deb-src.sources (deb-src for the Debian release this machine runs,
# the deb822 equivalent of uncommenting `deb-src` lines), installs librdkafka-dev and dpkg-dev, and
# runs `apt-get source librdkafka` into benchmarks/build/src (gitignored). Later runs are no-ops:
# make only calls this when the binary is missing.
set -eu
out=${1:-benchmarks/build/rdkafka_performance}
python=${2:-}
build=$(dirname "$out")
src=$build/src
mkdir -p "$src"

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "build_rdkafka_perf: $1 (run as root once, or: apt-get install librdkafka-dev dpkg-dev" \
         "and apt-get source librdkafka into $src)" >&2
    exit 1
  fi
}

if ! dpkg -s librdkafka-dev >/dev/null 2>&1 || ! command -v dpkg-source >/dev/null 2>&1; then
  need_root "librdkafka-dev/dpkg-dev missing"
  apt-get update -qq
  apt-get install -y -qq librdkafka-dev dpkg-dev >/dev/null
fi

if ! ls -d "$src"/librdkafka-*/examples >/dev/null 2>&1; then
  list=/etc/apt/sources.list.d/kbroker-deb-src.sources
  if ! grep -rqs '^[[:space:]]*\(deb-src\|Types:.*deb-src\)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    need_root "no deb-src entries for apt-get source"
    . /etc/os-release
    cat >"$list" <<SOURCES
# Added by kbroker's benchmarks/build_rdkafka_perf.sh: source packages for \`apt-get source\`.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $VERSION_CODENAME $VERSION_CODENAME-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    apt-get update -qq
  fi
  # The source version apt picks is the candidate of librdkafka-dev: examples and library match.
  (cd "$src" && apt-get source -qq librdkafka >/dev/null)
fi

tree=$(ls -d "$src"/librdkafka-*/ | head -1)
# The example includes the tree's internal rd.h (for rd_clock()), which needs the config.h that
# ./configure writes (a few seconds; nothing is built). rdkafka.h and the library itself come from
# librdkafka-dev (-I/usr/include/librdkafka first, -lrdkafka).
if [ ! -f "$tree/config.h" ]; then
  (cd "$tree" && ./configure --disable-ssl --disable-gssapi --disable-zstd --disable-curl --disable-sasl >/dev/null)
fi
# The wheel's library: confluent_kafka.libs/librdkafka-<hash>.so.1 beside the package (auditwheel layout).
wheel_lib=
if [ -n "$python" ]; then
  wheel_lib=$("$python" - <<'PY' 2>/dev/null || true
import glob, os
import confluent_kafka
libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
found = sorted(glob.glob(os.path.join(libs, "librdkafka*.so*")))
print(found[0] if found else "")
PY
)
fi
if [ -n "$wheel_lib" ]; then
  dir=$(dirname "$wheel_lib")
  cc -O2 -o "$out" "$tree/examples/rdkafka_performance.c" -I/usr/include/librdkafka -I"$tree/src" \
     -L"$dir" -l:"$(basename "$wheel_lib")" -Wl,-rpath,"$dir" -lpthread -lm
  echo "built $out from $tree against the confluent-kafka wheel's $wheel_lib"
else
  cc -O2 -o "$out" "$tree/examples/rdkafka_performance.c" -I/usr/include/librdkafka -I"$tree/src" -lrdkafka -lpthread -lm
  echo "built $out from $tree against librdkafka-dev $(dpkg-query -W -f='${Version}' librdkafka-dev)"
fi
