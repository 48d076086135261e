# The two commands: `make serve` and `make test`. Both create the virtualenv when needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.kbroker-installed
TEST_STAMP := $(VENV)/.kbroker-test-installed
JS_DIR := tests/compat/js

.PHONY: serve test test-all lint bench install install-test clean-data tools spark-demo compose-up compose-down compose-test chaos

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml setup.py storage/_recwalk.c spark_jobs/_record_columns.c | $(PY)
	$(PIP) install -q -e .
	touch $@

$(TEST_STAMP): pyproject.toml setup.py storage/_recwalk.c spark_jobs/_record_columns.c | $(PY)
	$(PIP) install -q -e '.[test,spark]'
	touch $(STAMP) $@

install: $(STAMP)

install-test: $(TEST_STAMP) tools

# Client tools used by the compatibility tests: kcat (Debian) and kafkajs (npm); etcd (Debian etcd-server) for tests/cluster/;
# promtool (Debian prometheus) for tests/integration/test_metrics.py; for the fault campaigns (make chaos) and their
# tests: faketime (clock faults), nftables and iproute2 (network partitions between namespaces).
tools:
	@missing=""; \
	  command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	  command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	  command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	  command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	  command -v nft >/dev/null 2>&1 || missing="$$missing nftables"; \
	  command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ]; then echo "installing Debian packages:$$missing"; \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null; \
	    else echo "note: missing Debian packages:$$missing (apt-get install$$missing); the tests that need them skip locally and fail under CI"; fi; \
	  fi
	@if command -v npm >/dev/null 2>&1 && [ -f $(JS_DIR)/package-lock.json ] && [ ! -d $(JS_DIR)/node_modules ]; then \
	  cd $(JS_DIR) && npm ci --silent --no-audit --no-fund; fi

# `make serve PORT=19092` moves both the listener and the advertised address (overriding only
# `listeners` would keep advertising 9092 and send clients to another broker).
PORT ?=
serve: $(STAMP)
	$(VENV)/bin/kbroker serve config/server.properties $(if $(PORT),--override listeners=PLAINTEXT://127.0.0.1:$(PORT) --override advertised.listeners=PLAINTEXT://127.0.0.1:$(PORT))

# The default suite mostly waits on brokers, etcd and Spark: two worker processes (pytest-xdist),
# each taking whole test files, halve its time on a 2-core machine. TEST_WORKERS=0 runs it in one.
TEST_WORKERS ?= 2
test: install-test
	$(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadfile

test-all: install-test
	$(PY) -m pytest -q -m ''

lint: install-test
	$(VENV)/bin/ruff check .

RDKAFKA_PERF := benchmarks/build/rdkafka_performance

# Side-by-side kbroker vs Tansu vs the null-broker ceiling (report + charts under benchmarks/results/);
# `BENCH_ARGS=--quick` for a smoke run (report under benchmarks/results/quick/, the committed one is kept).
bench: install-test $(RDKAFKA_PERF)
	$(PIP) install -q -e '.[bench]'
	$(PY) benchmarks/bench.py $(BENCH_ARGS)

# A fault campaign (docs/fault-campaigns.md): 3 brokers on a 3-member etcd, the queue and transactional workloads,
# every kind of fault, the history checked for Jepsen's anomaly classes; exits non-zero on any anomaly, last line a
# summary, the report under build/chaos/. As root (network namespaces, tmpfs). CHAOS_ARGS adds options, e.g.
# CHAOS_ARGS="--faults kill,partition --workloads queue" (python -m tests.campaign --help lists them).
DURATION ?= 120
SEED ?= 1
chaos: install-test
	$(PIP) install -q -e '.[chaos]'
	$(PY) -m tests.campaign --duration $(DURATION) --seed $(SEED) $(CHAOS_ARGS)

# librdkafka's rdkafka_performance (the C client of `make bench`), built once from Debian's librdkafka
# source package (gitignored benchmarks/build/), linked against the librdkafka of the venv's confluent-kafka
# wheel (librdkafka-dev's if the wheel has none). Without root and the packages the build says what is
# missing and `make bench` runs without the C-client rows. Rebuilt when the script changes.
$(RDKAFKA_PERF): benchmarks/build_rdkafka_perf.sh | install-test
	benchmarks/build_rdkafka_perf.sh $@ $(PY) || echo "note: rdkafka_performance not built; make bench skips the C client"

# Runs the `uppercase` job against the broker on 127.0.0.1:9092 (or a temporary one) and says what it did.
spark-demo: install-test
	SPARK_LOCAL_IP=127.0.0.1 $(PY) -m spark_jobs.demo

# The same job on a standalone Spark cluster (master + 2 workers on 127.0.0.1, stopped afterwards),
# the code shipped to the executors with --py-files (docs/spark.md, "Standalone cluster").
.PHONY: spark-cluster-demo
spark-cluster-demo: install-test
	SPARK_LOCAL_IP=127.0.0.1 $(PY) -m spark_jobs.cluster_demo

# The three-broker cluster of docker-compose.yml (docs/docker.md): `docker compose` when a Docker engine
# answers, podman-compose otherwise. COMPOSE_ARGS adds options, e.g. COMPOSE_ARGS="--profile monitoring".
compose-up:
	deploy/container/compose.sh $(COMPOSE_ARGS) up -d

# Brokers first: podman-compose stops every service at once, and a broker that outlives etcd cannot
# revoke its lease (the next start would wait for it to expire).
compose-down:
	deploy/container/compose.sh $(COMPOSE_ARGS) stop kbroker-1 kbroker-2 kbroker-3
	deploy/container/compose.sh $(COMPOSE_ARGS) down

# As root on a machine with no image registry: installs podman & co from Debian, builds the images
# (deploy/container/prepare.sh) and runs tests/compose/ against the hostnet override. Part of test-all.
compose-test: install-test
	$(PY) -m pytest -q -s -m slow tests/compose

clean-data:
	rm -rf ./data
