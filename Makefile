# ignite-tf. Every target sets up what it needs first (make setup is idempotent).
SHELL := /bin/bash
PY := .venv/bin/python
UV := .venv/bin/uv
N ?= 2
# Local Ignite cluster: port base (thin client PORT.., discovery PORT+10.., communication PORT+20..), its state
# folder (pids, logs, persistence; default ~/.cache/ignite-tf/local-cluster), AUTH=1 / TLS=1 to secure it.
# Set on the make command line only (`:=`: a PORT in the environment, common elsewhere, is not taken).
PORT := 10800
STATE_DIR :=
AUTH :=
TLS :=
YES = $(filter 1 true yes,$(1))
IGNITE := $(PY) -m ignite_tf_dev.ignite $(if $(STATE_DIR),--state-dir $(STATE_DIR))
K8S_NODES ?= 3
STAMP := .venv/.setup-done
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup browser lock check test docs demo bench bench-k8s lint airflow ignite-up ignite-down ignite-status k8s-build k8s-up k8s-down k8s-status image clean

setup: $(STAMP)

# The venv is rebuilt from the committed lock whenever the lock or pyproject changes.
$(STAMP): requirements/lock.txt pyproject.toml devtools/pyproject.toml
	@test -x .venv/bin/python || python3 -m venv .venv
	@test -x $(UV) || .venv/bin/pip install -q uv==0.13.8
	$(UV) pip sync -q --compile-bytecode --python $(PY) requirements/lock.txt
	$(UV) pip install -q --python $(PY) --no-deps -e . -e devtools
	$(PY) -m ignite_tf_dev.ignite fetch
	@touch $(STAMP)

# Headless Chromium and its WebDriver for the browser tests (tests/ui), from Debian's packages when missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  ( $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q chromium chromium-driver )

# Re-resolve requirements/requirements.in into the lock (run by hand, then commit the lock).
lock:
	@test -x $(UV) || (python3 -m venv .venv && .venv/bin/pip install -q uv==0.13.8)
	$(UV) pip compile -q requirements/requirements.in -o requirements/lock.txt --python-version 3.11

# The fast tier: lint, then every test that starts no real component (tests/support/tiers.py), in under 3 minutes.
# Run it after every change; `make test` runs everything. Each run's durations stay in .test-reports/ (JUnit XML).
REPORT = .test-reports/$(1)-$(shell date -u +%Y%m%dT%H%M%S).xml
check: setup
	.venv/bin/ruff check provider devtools tests bench dags plugins
	$(PY) -m pytest -q --tier check --durations=15 --junitxml=$(call REPORT,check) $(PYTEST_ARGS)

test: setup browser
	$(PY) -m pytest -q --durations=40 --junitxml=$(call REPORT,test) $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/) into site/; --strict makes a broken link or anchor an error.
# NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner, not a warning about these docs.
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site

demo: setup
	$(PY) -m ignite_tf_dev.demo

bench: setup
	$(PY) bench/ingest.py
	$(PY) bench/validate.py
	$(PY) bench/startup.py
	$(PY) bench/e2e.py

# Launch -> first step, Kubernetes launcher beside local (needs root; starts and stops the local Kubernetes).
bench-k8s: setup
	$(PY) bench/k8s/startup.py

# The Airflow UI on this project's dags/ and plugins/ (SQLite DB in .airflow/). The ignite_default connection
# points at `make ignite-up`'s nodes. airflow standalone prints the URL and the admin login when it is ready.
airflow: setup
	@echo "Airflow UI: http://localhost:8080 (login printed below by airflow standalone; Ctrl-C stops it)"
	@echo "TensorFlow clusters page: Browse > TensorFlow clusters, or http://localhost:8080/ignite-tf/"
	@echo "Ignite: the ignite_default connection uses 127.0.0.1:10800,127.0.0.1:10801 -- run 'make ignite-up' first"
	AIRFLOW_HOME=$(CURDIR)/.airflow AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags AIRFLOW__CORE__PLUGINS_FOLDER=$(CURDIR)/plugins \
	AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW_CONN_IGNITE_DEFAULT='{"conn_type": "ignite", "host": "127.0.0.1:10800,127.0.0.1:10801"}' \
	.venv/bin/airflow standalone

lint: setup
	.venv/bin/ruff check provider devtools tests bench dags plugins

ignite-up: setup
	$(IGNITE) up -n $(N) --port $(PORT) $(if $(call YES,$(AUTH)),--auth) $(if $(call YES,$(TLS)),--tls)

ignite-down: setup
	$(IGNITE) down

ignite-status: setup
	$(IGNITE) status

# A local Kubernetes (ignite_tf_dev.k8s.cluster): built once into ~/.cache/ignite-tf/k8s-<version> (about 30 minutes
# the first time on 2 cores), then etcd + control plane + $(K8S_NODES) kwok nodes + one real node, cluster DNS, an
# object store and Ignite's pods; ends with the export lines a shell needs (`eval "$$(make -s k8s-up | grep ^export)"`).
# Needs root.
k8s-build: setup
	$(PY) -m ignite_tf_dev.k8s build

k8s-up: setup
	$(PY) -m ignite_tf_dev.k8s up -n $(K8S_NODES)

# The TensorFlow task image as a docker-archive file (docker load -i / skopeo copy docker-archive:...); the same
# layers the local Kubernetes runs (built with them: root, about 10 minutes the first time).
IMAGE_OUT ?= dist/ignite-tf-task.tar
image: setup
	$(PY) -m ignite_tf_dev.k8s image --out $(IMAGE_OUT)

k8s-down: setup
	$(PY) -m ignite_tf_dev.k8s down

k8s-status: setup
	$(PY) -m ignite_tf_dev.k8s status

clean:
	rm -rf .venv .airflow build dist provider/*.egg-info devtools/*.egg-info
