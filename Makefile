# The two entry points the README promises. Everything they need is installed from here.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo demo-dra test install lint typecheck contracts kubernetes bench bench-scale

$(BIN)/kubegpu: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/kubegpu

install: $(BIN)/kubegpu

demo: install kubernetes
	$(BIN)/kubegpu operator demo

# The same stack through Dynamic Resource Allocation: a GPUCluster, claims, dynamic MIG.
demo-dra: install kubernetes
	$(BIN)/kubegpu operator demo --dra

lint: install
	$(BIN)/ruff check src tests bench scripts/catalog-from-reference
	$(BIN)/ruff format --check src tests bench

typecheck: install
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

# The real control planes the integration tests run: every supported Kubernetes version
# (built once each, cached in ~/.cache/kubegpu/k8s/<version>).
kubernetes:
	scripts/build-kubernetes --all

# Everything on the default Kubernetes version, then the DRA and device-plugin integration
# tests again on the oldest supported one (KUBEGPU_K8S_VERSION picks the control plane).
OLDEST_K8S ?= v1.35.8
OLDEST_K8S_TESTS ?= tests/integration/test_dra_real_plugin.py tests/integration/test_dra_quickstart.py tests/integration/test_device_plugin.py

test: lint typecheck contracts kubernetes
	$(BIN)/pytest
	KUBEGPU_K8S_VERSION=$(OLDEST_K8S) $(BIN)/pytest $(OLDEST_K8S_TESTS)

bench: install kubernetes
	$(BIN)/python -m bench

# 10, 100, 300 and 1,000 simulated 8-GPU nodes (BENCH_SCALE_NODES=10,100 for fewer): writes
# bench/scale.md and its plots. Long (the 1,000-node point alone takes most of an hour on
# 2 cores); not part of `make bench` nor `make test`.
bench-scale: install kubernetes
	$(BIN)/python -m bench.bench_scale
