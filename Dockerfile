# The kbroker image: `kbroker serve --from-env` as a non-root user, data in /var/lib/kbroker.
# Configuration comes from KBROKER_* environment variables by the official Kafka image's rule
# (KBROKER_NODE_ID -> node.id; see docs/docker.md). Any Debian-like base with python3 >= 3.11 and
# the venv module works: BASE_IMAGE=localhost/kbroker-base is what deploy/container/prepare.sh builds
# on machines with no registry.
ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS build
# The optional C extensions (storage/_recwalk.c, the record walk; spark_jobs/_record_columns.c, the
# Spark source's record decoder and sink's encoder; built by setup.py) need a C compiler and
# Python's headers, in this stage only: on a Debian-like base they come from apt (python3-dev only
# when the base's Python has no Python.h). Without them the install warns and the pure-Python walk
# runs.
RUN if command -v apt-get >/dev/null 2>&1; then \
      headers=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "python3-dev")'); \
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         gcc libc6-dev $headers >/dev/null && rm -rf /var/lib/apt/lists/*) \
      || echo "note: no C compiler in the build stage; the image runs the pure-Python record walk"; \
    fi
# A virtualenv: Debian-based bases refuse pip installs into the system Python (PEP 668).
RUN python3 -m venv /opt/kbroker
COPY pyproject.toml README.md setup.py /src/
# Dependencies first, in a layer of their own: an install of the project with empty packages pulls
# them, so a source change rebuilds only the small layer below.
RUN for p in broker cli cluster coordinator protocol registry security spark_jobs storage; do \
      mkdir -p /src/$p && touch /src/$p/__init__.py; done \
 && /opt/kbroker/bin/pip install --no-cache-dir --disable-pip-version-check /src \
 && rm -rf /src/broker /src/cli /src/cluster /src/coordinator /src/protocol /src/registry /src/security /src/spark_jobs \
    /src/storage
COPY broker /src/broker
COPY cli /src/cli
COPY cluster /src/cluster
COPY coordinator /src/coordinator
COPY protocol /src/protocol
COPY registry /src/registry
COPY security /src/security
COPY spark_jobs /src/spark_jobs
COPY storage /src/storage
RUN /opt/kbroker/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --force-reinstall /src

FROM ${BASE_IMAGE}
COPY --from=build /opt/kbroker /opt/kbroker
RUN groupadd --system --gid 1000 kbroker \
 && useradd --system --uid 1000 --gid kbroker --home-dir /var/lib/kbroker --no-create-home kbroker \
 && mkdir -p /var/lib/kbroker/data \
 && chown -R kbroker:kbroker /var/lib/kbroker
ENV PATH=/opt/kbroker/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    KBROKER_LOG_DIRS=/var/lib/kbroker/data \
    KBROKER_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KBROKER_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092
USER kbroker
WORKDIR /var/lib/kbroker
VOLUME ["/var/lib/kbroker"]
EXPOSE 9092
# ApiVersions against the first listener: healthy once the broker answers the protocol.
HEALTHCHECK --interval=5s --timeout=5s --start-period=20s --retries=5 CMD ["kbroker", "healthcheck"]
# kbroker handles SIGTERM itself (a clean stop within kbroker.shutdown.timeout.ms); compose adds
# `init: true` so that a PID-1 init forwards signals and reaps children.
STOPSIGNAL SIGTERM
ENTRYPOINT ["kbroker", "serve", "--from-env"]
