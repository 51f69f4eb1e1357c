# The two commands of the quickstart: `make run` and `make test`.
# Both set up .venv/ when it is missing or its inputs changed; otherwise setup is a no-op.
# Setup also builds the JVM decoder's jar (spark_jobs/java) and the broker plugin's (broker_plugin/java), so
# editing their sources re-runs it, and fetches the pinned Kafka jars (artifacts/), so editing their list
# re-runs it.
# The quota engine's hot modules are compiled with mypyc, so editing them re-runs setup.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
COMPILED := $(wildcard quotas/*.py)  # setup.py compiles some of them with mypyc
JVM := spark_jobs/jvm.py $(wildcard spark_jobs/java/telemetry/sink/*.java)  # the JVM decoder's jar
ARTIFACTS := $(wildcard artifacts/*.py artifacts/*/pom.xml artifacts/*/jars.sha256 artifacts/*/requirements.txt)  # Kafka's jars (Maven), older clients
PLUGIN := $(wildcard broker_plugin/*.py broker_plugin/java/telemetry/sink/forwarder/*.java)  # the broker plugin's jar

.PHONY: setup browser ldap test check fast lint typecheck unit run bench proto clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py scripts/setup.sh $(COMPILED) $(JVM) $(ARTIFACTS) $(PLUGIN)
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

# The browser tests' Chromium (Debian's package; installed when missing and we are root on Debian)
browser:
	bash scripts/browser.sh

# The SQL server's LDAP test's OpenLDAP server (Debian's slapd; installed when missing and we are root)
ldap:
	bash scripts/ldap.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

# Every test, in two pytest processes side by side (scripts/unit.sh says why): `-m spark` and the rest,
# each in a new random order (pytest-randomly prints the seed), under the leak guard and the per-test
# timeout (tests/support/leaks.py, [tool.pytest.ini_options] in pyproject.toml).
unit: setup browser ldap
	BIN=$(BIN) bash scripts/unit.sh

test: lint typecheck unit

# The fast loop for everyday work (docs/architecture.md, "The fast loop"): lint, types, and the tests
# that need no Spark, no browser, no Helm and no server process or real server on loopback.
FAST := not integration and not spark and not helm and not browser

fast: setup
	$(BIN)/pytest -q -m "$(FAST)"

check: lint typecheck fast

# The sink on its embedded default (./data; gRPC 4317, HTTP 4318, Kafka 9094); telemetry-sink.yaml if present.
run: setup
	$(BIN)/telemetry-sink serve $(if $(wildcard telemetry-sink.yaml),--config telemetry-sink.yaml)

bench: setup
	$(BIN)/python benchmarks/subscriptions/bench.py
	$(BIN)/python benchmarks/quotas/bench.py
	$(BIN)/python benchmarks/quotas/request_overhead.py
	$(BIN)/python benchmarks/push_path/bench.py
	$(BIN)/python benchmarks/push_path/forwarded.py
	$(BIN)/python benchmarks/kafka_listener/bench.py
	$(BIN)/python benchmarks/kafka_listener/java_fleet.py
	$(BIN)/python benchmarks/broker_plugin/bench.py
	$(BIN)/python benchmarks/hostile/bench.py
	$(BIN)/python benchmarks/durability/bench.py
	$(BIN)/python benchmarks/rollup/bench.py
	$(BIN)/python benchmarks/dashboard/bench.py
	$(BIN)/python benchmarks/sql_server/bench.py

# Regenerate the gRPC code of ingest/proto/client_telemetry.proto (checked in; a test catches staleness)
proto: setup
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \
		ingest/proto/client_telemetry.proto

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
