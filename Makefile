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
PYTEST := $(PY) -m pytest
NBVAL := --nbval --nbval-sanitize-with tests/sanitize.cfg

.PHONY: setup lab test test-unit test-notebooks test-browser student screenshots bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

lab: setup
	$(VENV)/bin/jupyter lab notebooks/00_start_here.ipynb

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
	$(PY) -m lmlessons.bench

clean:
	rm -rf $(VENV) *.egg-info
