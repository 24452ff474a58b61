# lmlessons: `make lab` opens the course, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Keep the repo clean: no bytecode, no pytest cache, caches in the user's cache dir.
export PYTHONDONTWRITEBYTECODE := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export HYPOTHESIS_STORAGE_DIRECTORY ?= $(or $(TMPDIR),/tmp)/lmlessons-hypothesis
# Reproducible numbers on every x86-64 CPU: the stored notebook outputs were computed with torch's
# AVX2 kernels, MKL's AVX2 code path (Conditional Numerical Reproducibility) and oneDNN capped at
# AVX2. Without these, a CPU with AVX-512 or AMX rounds differently and a loss printed after
# 120 training steps can differ in its last digit (then strict nbval fails). Costs little speed.
export ATEN_CPU_CAPABILITY := avx2
export MKL_CBWR := AVX2
export ONEDNN_MAX_CPU_ISA := AVX2
PYTEST := $(PY) -m pytest
NBVAL := --nbval --nbval-sanitize-with tests/sanitize.cfg

.PHONY: setup lab test test-unit test-notebooks test-browser student screenshots bench budgets lesson-times clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

# JupyterLab refuses to run as root (containers, Binder-like set-ups) without --allow-root.
lab: setup
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/00_start_here.ipynb

test: setup
	$(PYTEST) tests notebooks $(NBVAL)

test-unit: setup
	$(PYTEST) tests -m "not browser"

test-notebooks: setup
	$(PYTEST) notebooks $(NBVAL)

test-browser: setup
	$(PYTEST) tests -m browser

student: setup
	$(PY) -m lmlessons.student

screenshots: setup
	$(PY) -m lmlessons.screenshots

bench: setup
	$(PY) -m lmlessons.bench $(BENCH_ARGS)

budgets: setup
	$(PY) -m lmlessons.budgets --no-live

# Wall time of each lesson executed top to bottom in a fresh kernel (outputs go to a temp dir).
lesson-times: setup
	@out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	for nb in notebooks/*.ipynb; do \
	  TIMEFORMAT="$$(basename $$nb): %R s"; \
	  time $(VENV)/bin/jupyter nbconvert --to notebook --execute --output-dir "$$out" "$$nb" >/dev/null 2>&1 \
	    || echo "FAILED $$nb"; \
	done; echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"

clean:
	rm -rf $(VENV) *.egg-info
