# The two entry points the README promises. Everything they need is installed from here.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo demo-dra test install lint typecheck contracts kubernetes bench bench-scale lock image release

# The environment is the lock: every package at its pinned version and hash (runtime, planner
# and dev tools: requirements/dev.lock), then kubegpu itself with nothing resolved again.
$(BIN)/kubegpu: pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements/dev.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(BIN)/kubegpu

install: $(BIN)/kubegpu

# Re-resolves both locks from pyproject.toml (after changing a dependency there):
# requirements/runtime.lock is what the image installs, requirements/dev.lock adds the
# planner and dev extras at the runtime lock's versions. tests/unit/test_lock.py fails while
# pyproject.toml and the locks disagree.
LOCK_FLAGS = --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make lock"
lock: install
	$(BIN)/uv pip compile $(LOCK_FLAGS) pyproject.toml -o requirements/runtime.lock
	$(BIN)/uv pip compile $(LOCK_FLAGS) pyproject.toml --extra planner --extra dev \
		-c requirements/runtime.lock -o requirements/dev.lock

# The operand image for linux/amd64 and linux/arm64 under dist/, with no Docker engine and no
# registry (scripts/build-image; ARCHES=amd64 for one). Not part of `make test`.
ARCHES ?= amd64 arm64
image: install
	scripts/build-image $(ARCHES)

# dist/release: the image archives, their SBOMs, the chart package and SHA256SUMS.
release: image
	scripts/release

demo: install kubernetes
	$(BIN)/kubegpu operator demo

# The same stack through Dynamic Resource Allocation: a GPUCluster, claims, dynamic MIG.
demo-dra: install kubernetes
	$(BIN)/kubegpu operator demo --dra

lint: install
	$(BIN)/ruff check src tests bench scripts/catalog-from-reference scripts/image-sbom scripts/image-index
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
