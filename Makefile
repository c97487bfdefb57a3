# parlsched: every target installs what it needs; nothing relies on a hand install.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
RUNDIR := $(CURDIR)/run

.PHONY: venv run test test-all bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

run: $(STAMP)
	mkdir -p $(RUNDIR)
	$(VENV)/bin/parlschedd --config config/parlschedd.yaml --socket $(RUNDIR)/parlschedd.sock --state-dir $(RUNDIR)

test: $(STAMP)
	$(PY) -m pytest

test-all: $(STAMP)
	$(PY) -m pytest -m ''

bench: $(STAMP)
	$(PY) bench/sim_scale.py

clean:
	rm -rf $(VENV) $(RUNDIR) build *.egg-info .pytest_cache
