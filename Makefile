# The streaming lakehouse. `make help` lists the targets.
# Everything a run creates lives in $(STATE) (git-ignored); the virtualenv in $(VENV).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STATE := $(or $(LAKEHOUSE_HOME),$(CURDIR)/.lakehouse)
KAFKA_PORT := $(or $(LAKEHOUSE_KAFKA_PORT),9092)
JARS_STAMP := $(STATE)/jars/.complete
DEBEZIUM_STAMP := $(STATE)/jars/debezium/.complete
# The default run in TEST_WORKERS pytest processes (pytest-xdist), a test file per worker at a
# time (module fixtures built once), taken in collection order, which tests/conftest.py starts
# with the longest files (xdist would put the files with most tests first); 0 runs it in this
# process. Each worker has its own broker, Spark session and state folder (tests/conftest.py).
TEST_WORKERS ?= 2
PYTEST_DEFAULT := -m "not slow and not chaos and not cluster and not debezium" \
	-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: help setup install protos jars demo docs test test-unit test-integration test-slow test-cluster test-chaos lint format clean preflight chromium faketime \
	debezium debezium-databases test-debezium

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: install protos jars ## Install everything that is missing (virtualenv, compiled schemas, JVM jars); a no-op when done

install: $(VENV)/.installed ## Create the virtualenv and install the project with its pinned dependencies

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -n "$(PYTHON)" || { echo "error: Python 3.11+ not found (python3.11 or python3)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

protos: install ## Compile lakehouse/contracts/schemas/*.proto into lakehouse/contracts/generated/ (a no-op when up to date)
	@$(BIN)/python -m lakehouse.contracts.protobuf

jars: $(JARS_STAMP) ## Fetch the Kafka broker, Iceberg runtime, connectors, JDBC driver from Maven Central

$(JARS_STAMP): jvm/pom.xml jvm/spark/pom.xml jvm/kafka/pom.xml jvm/rest-catalog/pom.xml jvm/s3-store/pom.xml jvm/settings.xml \
		jvm/protobuf-decoder/pom.xml $(shell find jvm/protobuf-decoder/src -name '*.java') \
		jvm/json-decoder/pom.xml $(shell find jvm/json-decoder/src -name '*.java') \
		jvm/catalog/pom.xml $(shell find jvm/catalog/src -name '*.java') \
		jvm/thrift-auth/pom.xml $(shell find jvm/thrift-auth/src -name '*.java')
	@$(PYTHON) lakehouse/core/preflight.py java
	@$(PYTHON) lakehouse/core/preflight.py mvn
	@echo "fetching JVM artifacts into $(STATE)/jars (first time: a few minutes)"
	rm -rf $(STATE)/jars/spark $(STATE)/jars/kafka $(STATE)/jars/rest-catalog $(STATE)/jars/s3-store $(STATE)/jars/build
	mvn -q -B -gs jvm/settings.xml -f jvm/pom.xml package dependency:copy-dependencies -Dlakehouse.jars=$(STATE)/jars
	@touch $@

preflight:
	@$(PYTHON) lakehouse/core/preflight.py java
	@$(PYTHON) lakehouse/core/preflight.py port $(KAFKA_PORT) $(STATE)/kafka/broker.pid

# $(call apt_install,COMMAND,PACKAGE,WHY): install Debian's PACKAGE if COMMAND is missing, as root or
# through sudo, refreshing the package lists once if the install fails; one error line otherwise
define apt_install
	@command -v $(1) >/dev/null && exit 0; \
	sudo=""; if [ "$$(id -u)" != 0 ]; then \
		command -v sudo >/dev/null || { echo "error: $(1) is not installed and installing it needs root (no sudo): apt-get install $(2)"; exit 1; }; \
		sudo=sudo; fi; \
	command -v apt-get >/dev/null || { echo "error: $(1) is not installed and there is no apt-get: install $(2) by hand"; exit 1; }; \
	echo "installing $(2) (Debian package)"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(2) \
		|| { echo "apt-get install failed: refreshing the package lists (apt-get update), then retrying"; \
			$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(2); } \
		|| { echo "error: could not install $(2) with apt-get (see above); $(3)"; exit 1; }
endef

chromium: ## Install headless Chromium (Debian package) for the report's browser test, if missing
	$(call apt_install,chromium,chromium,the report's browser test needs it)

faketime: ## Install faketime (Debian package), which the clock tests run real processes under, if missing
	$(call apt_install,faketime,faketime,the clock tests need it)

debezium: debezium-databases $(DEBEZIUM_STAMP) ## PostgreSQL and MariaDB (Debian packages, if missing), Debezium, a Kafka Connect worker and Debezium Server (Maven Central; Java 21+ beside 17) for `make test-debezium`

debezium-databases:
	@missing=""; \
	{ ls /usr/lib/postgresql/*/bin/pg_ctl || command -v pg_ctl; } >/dev/null 2>&1 || missing="postgresql"; \
	{ command -v mariadbd || test -x /usr/sbin/mariadbd; } >/dev/null 2>&1 && command -v mariadb >/dev/null \
		|| missing="$$missing mariadb-server-core mariadb-client-core"; \
	test -z "$$missing" && exit 0; \
	missing="$${missing# }"; \
	sudo=""; if [ "$$(id -u)" != 0 ]; then \
		command -v sudo >/dev/null || { echo "error: installing $$missing needs root (no sudo): apt-get install $$missing"; exit 1; }; \
		sudo=sudo; fi; \
	command -v apt-get >/dev/null || { echo "error: there is no apt-get: install PostgreSQL and MariaDB servers by hand ($$missing)"; exit 1; }; \
	echo "installing $$missing (Debian packages)"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing \
		|| { echo "apt-get install failed: refreshing the package lists (apt-get update), then retrying"; \
			$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; } \
		|| { echo "error: could not install $$missing with apt-get (see above); the Debezium tests need them"; exit 1; }

# Debezium 3.5 (embedded engine; PostgreSQL, MySQL and MariaDB connectors) and its runner: Java 17+,
# the same Java as the broker; a Kafka Connect worker (jvm/kafka-connect: Connect 4.1.1 with its
# REST server) that runs the connector file `lakehouse cdc add` prints, with those connectors as
# its plugins; and Debezium Server rebuilt from its modules (jvm/debezium-server/pom.xml says
# how and why), which needs a JDK 21+ beside the 17: preflight finds one or says what to install.
$(DEBEZIUM_STAMP): jvm/pom.xml jvm/debezium/pom.xml jvm/kafka-connect/pom.xml jvm/debezium-server/pom.xml \
		jvm/settings.xml $(shell find jvm/debezium/src -name '*.java')
	@$(PYTHON) lakehouse/core/preflight.py java
	@$(PYTHON) lakehouse/core/preflight.py mvn
	@$(PYTHON) lakehouse/core/preflight.py java-home 21 >/dev/null
	@echo "fetching Debezium, Kafka Connect and Debezium Server into $(STATE)/jars (first time: a few minutes)"
	rm -rf $(STATE)/jars/debezium $(STATE)/jars/build/debezium $(STATE)/jars/kafka-connect $(STATE)/jars/build/kafka-connect \
		$(STATE)/jars/debezium-server
	mvn -q -B -gs jvm/settings.xml -f jvm/debezium/pom.xml package dependency:copy-dependencies -Dlakehouse.jars=$(STATE)/jars
	mvn -q -B -gs jvm/settings.xml -f jvm/kafka-connect/pom.xml package dependency:copy-dependencies -Dlakehouse.jars=$(STATE)/jars
	JAVA_HOME="$$($(PYTHON) lakehouse/core/preflight.py java-home 21)" \
		mvn -q -B -gs jvm/settings.xml -f jvm/debezium-server/pom.xml package -Dlakehouse.jars=$(STATE)/jars
	@touch $@

demo: preflight setup ## Set up, then run the whole chain once on the local platform and print a summary
	$(BIN)/lakehouse demo

docs: install ## Build the documentation site (MkDocs, --strict) into .lakehouse/site/
	$(BIN)/mkdocs build --strict --site-dir $(STATE)/site

test: setup chromium faketime docs ## Set up, build the docs (a broken link fails), then run the default test suite (unit + integration, real Kafka/Spark/Iceberg)
	$(BIN)/pytest $(PYTEST_DEFAULT)

test-unit: setup ## Unit tests only: plain Python, no JVM (no Spark, no broker; tests/unit/test_suite_layout.py keeps it so)
	$(BIN)/pytest tests/unit

test-integration: setup chromium faketime ## Integration tests only: everything that starts a JVM (real broker, Spark, Iceberg, dbt, GX)
	$(BIN)/pytest tests/integration $(PYTEST_DEFAULT)

test-slow: setup ## Long-running tests
	$(BIN)/pytest -m slow

test-cluster: setup ## Spark standalone cluster and Thrift Server tests (about 4 minutes; not in `make test`)
	$(BIN)/pytest -m cluster

test-debezium: setup debezium ## Real CDC sources: PostgreSQL and MariaDB through Debezium into the pipeline (a few minutes; not in `make test`)
	$(BIN)/pytest -m debezium

test-chaos: setup ## The chaos suite in full (kills, broker restarts, poison, full disk...); figures to $(STATE)/chaos/results.jsonl
	LAKEHOUSE_CHAOS_RESULTS=$(STATE)/chaos/results.jsonl $(BIN)/pytest -m chaos

lint: install ## Static checks (ruff)
	$(BIN)/ruff check .

format: install ## Format the code (ruff)
	$(BIN)/ruff format .

clean: ## Stop the local broker and delete all state (data, catalog, jars, checkpoints, reports)
	-@test -x $(BIN)/lakehouse && $(BIN)/lakehouse kafka stop
	rm -rf $(STATE) target logs lakehouse/contracts/generated
