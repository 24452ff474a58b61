# lmlessons: `make lab` opens the course, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two install stamps: the course alone (what a learner needs, make lab) and everything (make setup).
COURSE_STAMP := $(VENV)/.installed-course
STAMP := $(VENV)/.installed
# Keep the repo clean: no bytecode, no pytest cache, caches in the user's cache dir.
export PYTHONDONTWRITEBYTECODE := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export HYPOTHESIS_STORAGE_DIRECTORY ?= $(or $(TMPDIR),/tmp)/lmlessons-hypothesis
export RUFF_CACHE_DIR ?= $(or $(TMPDIR),/tmp)/lmlessons-ruff
export MYPY_CACHE_DIR ?= $(or $(TMPDIR),/tmp)/lmlessons-mypy
PYTEST := $(PY) -m pytest
NBVAL := --nbval --nbval-sanitize-with tests/sanitize.cfg
# Two workers (pytest-xdist); each module, and each notebook with its kernel, stays in one worker.
XDIST := -n 2 --dist loadscope --no-loadscope-reorder
# Two workers on two cores: one torch thread per process (and per lesson kernel), not two each.
ONE_THREAD := OMP_NUM_THREADS=1
# Strict nbval in make test starts each lesson's kernel with the scalar kernels (--scalar-kernels,
# conftest.py): their float sums run in another order than the SIMD kernels that make execute
# stored the outputs with, so a stored output that depended on that order fails.
# axe-core (the site's accessibility check) from npm, into the venv: make test and make test-site.
AXE_CORE := axe-core@4.14.1
AXE := $(VENV)/node/node_modules/axe-core/axe.min.js

.PHONY: mutants setup setup-course lab lint test test-session test-fast test-unit test-notebooks test-portable test-browser test-binder test-classroom test-hub hub test-site site execute student content classroom screenshots bench budgets lesson-times record clean

# pip compiles each installed module to bytecode one file at a time (most of an install's time);
# compileall does it on every core afterwards, leaving out the test suites that packages ship
# (folders named tests: nothing imports them; a fifth of the compile). Like pip, it skips a file
# this Python cannot compile (torch ships one written for Python 3.12); -qq keeps that quiet.
PIP_INSTALL := $(PY) -m pip install --no-compile
COMPILE := $(PY) -m compileall -qq -j 0 -x '/tests/' $(VENV)/lib || true

# The course: its lock and the editable package, nothing else (torch's requirement brings the
# setuptools that the editable install builds with).
# $(call INSTALL,LOCKS,STAMPS): the venv (made if missing) with LOCKS, the editable package and
# one bytecode compile; then touch STAMPS.
define INSTALL
test -x $(PY) || $(PYTHON) -m venv $(VENV)
$(PY) -m pip install --upgrade pip
$(PIP_INSTALL) $(1)
$(PIP_INSTALL) --no-deps --no-build-isolation -e .
$(COMPILE)
touch $(2)
endef

$(COURSE_STAMP): requirements.txt pyproject.toml
	$(call INSTALL,-r requirements.txt,$(COURSE_STAMP))

# The course with the tests, lint, the website, nbgrader and the hub's packages: one resolve of all
# three locks (a package they share keeps its one pin), one install and one compile, whether or
# not make lab made the venv first; it stands for the course's stamp too.
$(STAMP): requirements.txt requirements-hub.txt requirements-test.txt pyproject.toml
	$(call INSTALL,-r requirements.txt -r requirements-hub.txt -r requirements-test.txt,$(COURSE_STAMP) $(STAMP))

setup-course: $(COURSE_STAMP)

# ipywidgets 7 (Colab's), apart: tests/test_widgets_ipywidgets7.py puts it first on PYTHONPATH.
IPYWIDGETS7 := $(VENV)/ipywidgets7
$(IPYWIDGETS7): requirements-ipywidgets7.txt $(STAMP)
	rm -rf $(IPYWIDGETS7)
	$(PY) -m pip install --quiet --no-deps --target $(IPYWIDGETS7) -r requirements-ipywidgets7.txt
	touch $(IPYWIDGETS7)

# ipywidgets 7's front end (classic Notebook 6.5, widgetsnbextension 3.6, ipywidgets 7.7.1:
# Google Colab's), apart: tests/test_browser_classic.py puts it first on the classic server's
# PYTHONPATH, JUPYTER_PATH and JUPYTER_CONFIG_PATH.
CLASSIC := $(VENV)/classic
$(CLASSIC): requirements-classic.txt $(STAMP)
	rm -rf $(CLASSIC)
	$(PY) -m pip install --quiet --no-deps --target $(CLASSIC) -r requirements-classic.txt
	touch $(CLASSIC)

setup: $(STAMP) $(IPYWIDGETS7) $(CLASSIC)

$(AXE):
	npm install --prefix $(VENV)/node --no-save --no-package-lock --no-audit --no-fund $(AXE_CORE)

# The course alone (setup-course), not the test and site tools. JupyterLab refuses to run as root
# (containers, Binder-like set-ups) without --allow-root.
lab: setup-course
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/00_start_here.ipynb

# ruff (lint and format check) and mypy over all the code (config in pyproject.toml); the lessons'
# What-if answer cells against their data (tools/content.py); the GitHub workflows against their
# schema and zizmor's security audit, both offline.
lint: setup
	$(VENV)/bin/ruff check lmlessons tools tests site hub
	$(VENV)/bin/ruff format --check lmlessons tools tests site hub
	$(VENV)/bin/mypy
	$(PY) -m tools.content --check
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(VENV)/bin/zizmor --offline --quiet .github/workflows/

# Lint runs beside the site's build and then beside the one session that tests everything, the
# built site included (tests/test_site.py, as make test-site runs it alone): lint is mostly one
# core (mypy), so the two cores stay busy. Their output is not synchronised, so pytest's progress
# shows as it comes; lint's few lines fall in between.
test: setup
	$(MAKE) --no-print-directory -j2 lint test-session

# make test's pytest session alone (make test runs it beside make lint).
test-session: setup site $(AXE)
	LMLESSONS_SITE_DIR=_build/site LMLESSONS_AXE=$(AXE) $(ONE_THREAD) \
	  $(PYTEST) tests notebooks -m "not hub_only" $(NBVAL) --scalar-kernels $(XDIST)

# The edit loop: unit, property, oracle and static tests, nothing marked slow (under 60 s), one
# torch thread per worker as in make test. Bytecode, the tests' assertion-rewritten modules
# included, is kept between runs in the user's own cache folder (not the repo, not a shared
# /tmp): a run after the first compiles neither the tests nor what they import (62 s to 47.5 s
# on the machine of docs/measurements.md).
PYCACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lmlessons/pycache
test-fast: setup
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(PYCACHE) $(ONE_THREAD) \
	  $(PYTEST) tests -m "not slow and not browser and not classroom" $(XDIST)

test-unit: setup
	$(PYTEST) tests -m "not browser and not classroom and not hub_only" $(XDIST)

# Strict nbval with the kernels this CPU picks (make test uses the scalar ones).
test-notebooks: setup
	$(ONE_THREAD) $(PYTEST) notebooks $(NBVAL) $(XDIST)

# Strict nbval of the lessons alone, with the scalar kernels and MKL's compatible code path too
# (--scalar-kernels=all, conftest.py): slower than make test's pass, and stricter.
test-portable: setup
	$(ONE_THREAD) $(PYTEST) notebooks $(NBVAL) --scalar-kernels=all $(XDIST)

test-browser: setup
	$(PYTEST) tests -m browser

# Binder's install as repo2docker runs it (binder/: `pip install --no-cache-dir -r
# binder/requirements.txt` from the repository's root) in a fresh venv in a temp folder, then
# lesson 01's student copy executed top to bottom in that venv's own kernel; the folder is removed.
test-binder:
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PYTHON) -m venv "$$tmp/venv" && \
	"$$tmp/venv/bin/python" -m pip install --quiet --no-cache-dir -r binder/requirements.txt && \
	"$$tmp/venv/bin/jupyter" nbconvert --to notebook --execute --output-dir "$$tmp" \
	  --ExecutePreprocessor.timeout=300 student/01_mlm_masking.ipynb && \
	echo "binder: student/01_mlm_masking.ipynb ran in $$tmp/venv"

# Maintainer target, not part of make test (as root; needs Debian's archive and PyPI): the fast
# tests and lesson 01's strict nbval on every Python from 3.11 to Debian's newest, each but the
# host's 3.11 in a cached Debian chroot (tools/pythons.py); one line per Python with its seconds.
.PHONY: test-pythons test-colab
test-pythons:
	$(PY) -m tools.pythons

# Maintainer target, not part of make test (as root; needs Debian's archive and PyPI): Google
# Colab's stack (requirements-colab.txt) in a Debian 13 chroot, each student copy's install cell
# checked against tools/colab_allowed.toml, then every student copy under nbval-lax (tools/colab.py).
test-colab:
	$(PY) -m tools.colab

# nbgrader builds, releases and autogrades the course (lessons 01 and 02) in a temp folder.
test-classroom: setup
	$(PYTEST) tests/test_classroom.py -m classroom

# A JupyterHub for one class on this machine (docs/teaching.md, "A class on JupyterHub"): its
# own venv of Debian's Python with the course and the hub, no test tools, in HUB_DIR; then the
# proxy and the hub on 127.0.0.1:HUB_PORT until Ctrl-C. As root: it makes an account per learner.
HUB_DIR ?= /srv/lmlessons-hub
HUB_PORT ?= 8000
HUB_PYTHON ?= /usr/bin/python3
hub:
	test -x $(HUB_DIR)/venv/bin/python || { $(HUB_PYTHON) -m venv $(HUB_DIR)/venv && \
	  $(HUB_DIR)/venv/bin/python -m pip install --quiet -r requirements.txt -r requirements-hub.txt; }
	$(HUB_DIR)/venv/bin/python -m tools.hub install --dir $(HUB_DIR) --python $(HUB_PYTHON)
	$(HUB_DIR)/venv/bin/python -m tools.hub run --dir $(HUB_DIR) --port $(HUB_PORT)

# A real hub for a class (the tests marked hub_only, which make test leaves to this target): its
# faults and isolation (tests/test_hub_faults.py), its small pass (tests/test_hub.py: two learners
# run lesson 01 and submit it, the teacher autogrades, make hub's own command, Chromium), then the
# load test (python -m tools.hub_load: 1, 4, 10 and 20 learners; its figures in the user's cache).
test-hub: setup
	$(ONE_THREAD) $(PYTEST) tests/test_hub_faults.py tests/test_hub.py -p no:randomly
	$(ONE_THREAD) $(PY) -m tools.hub_load

# The static website from the stored outputs (nothing is executed), into the ignored _build/site.
site: setup
	$(PY) site/build.py _build/site

# The built site in Chromium: every lesson page loads offline, with its figures, math and links
# (two workers, each with its own Chromium and server).
test-site: site $(AXE)
	LMLESSONS_SITE_DIR=_build/site LMLESSONS_AXE=$(AXE) $(PYTEST) tests/test_site.py -n 2 --dist load

# Re-execute every lesson in a fresh kernel, store its outputs (no timestamps), regenerate student/.
execute: setup
	$(PY) -m tools.execute

student: setup
	$(PY) -m tools.student

# Write the What-if model answers (lmlessons/data/content/whatif/) into the lessons' answer cells
# and regenerate the student copies of the lessons that changed.
content: setup
	$(PY) -m tools.content --write

# An nbgrader course folder (docs/teaching.md): every lesson an assignment, in the ignored _build/.
CLASSROOM ?= _build/classroom
classroom: setup
	$(PY) -m tools.classroom --dest $(CLASSROOM)

screenshots: setup
	$(PY) -m tools.screenshots

# Mutation testing of the core ([tool.mutmut] in pyproject.toml) with the fast tests, in a
# temporary copy of the repository (mutmut writes its mutants/ folder where it runs). One torch
# thread: mutmut forks a process per mutant, and torch's thread pool does not survive a fork.
# Prints the surviving mutants, then the counts (docs/measurements.md lists the equivalent ones).
mutants: setup
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git ls-files -z | xargs -0 cp --parents -t "$$tmp"; \
	cd "$$tmp" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(CURDIR)/$(VENV)/bin/mutmut run --max-children 2 >/dev/null; \
	$(CURDIR)/$(VENV)/bin/mutmut results; \
	$(CURDIR)/$(VENV)/bin/mutmut export-cicd-stats >/dev/null && cat mutants/mutmut-cicd-stats.json; echo

bench: setup
	$(PY) -m tools.bench $(BENCH_ARGS)

budgets: setup
	$(PY) -m tools.budgets --no-live

# Wall time of each lesson executed top to bottom in a fresh kernel (outputs go to a temp dir).
lesson-times: setup
	@out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	for nb in notebooks/*.ipynb; do \
	  TIMEFORMAT="$$(basename $$nb): %R s"; \
	  time $(VENV)/bin/jupyter nbconvert --to notebook --execute --output-dir "$$out" "$$nb" >/dev/null 2>&1 \
	    || echo "FAILED $$nb"; \
	done; echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"

# The long runs the lessons replay (the bug zoo, lessons 10, 11 and 12), recorded again into a
# folder outside the repository: compare with lmlessons/data/<topic>/, then copy what changed.
# On 2 cores each takes from several minutes (bug zoo) to about 20 (GRPO).
RECORD_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lmlessons/recordings
record: setup
	$(ONE_THREAD) $(PY) -m tools.bugzoo --out $(RECORD_DIR)/bugzoo
	$(ONE_THREAD) $(PY) -m tools.answer_only_seeds --out $(RECORD_DIR)/answer_only
	$(ONE_THREAD) $(PY) -m tools.preference_runs --out $(RECORD_DIR)/preference
	$(ONE_THREAD) $(PY) -m tools.grpo_runs --out $(RECORD_DIR)/grpo
	$(ONE_THREAD) $(PY) -m tools.grpo_learn --out $(RECORD_DIR)/grpo_learn
	$(ONE_THREAD) $(PY) -m tools.moe_runs --out $(RECORD_DIR)/moe
	$(ONE_THREAD) $(PY) -m tools.zloss_runs --out $(RECORD_DIR)/zloss
	$(ONE_THREAD) $(PY) -m tools.mtp_runs --out $(RECORD_DIR)/mtp

clean:
	rm -rf $(VENV) *.egg-info
