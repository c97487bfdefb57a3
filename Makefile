# parlsched: every target installs what it needs; nothing relies on a hand install.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# root's, outside the checkout: the daemon refuses a config or state dir under a directory a user owns
RUNDIR := /run/parlsched-dev
SYSDEPS_STAMP := $(VENV)/.sysdeps-stamp

.PHONY: venv sysdeps run lint test test-all test-slow bench fuzz clean

venv: $(STAMP)

# systemd-python (the optional "systemd" extra) has no wheel: pip compiles it against
# libsystemd, with a C compiler and the headers of the Python that makes the venv.
HAVE_BUILD_DEPS = pkg-config --exists libsystemd && command -v cc >/dev/null \
	&& $(PYTHON) -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
$(SYSDEPS_STAMP):
	mkdir -p $(VENV)
	$(HAVE_BUILD_DEPS) \
	  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pkg-config libsystemd-dev gcc python3-dev; }
	@$(HAVE_BUILD_DEPS) || { echo "make: systemd-python needs pkg-config, libsystemd, a C compiler and the headers of $(PYTHON) (Python.h); install them (python3-dev is the distribution Python's)" >&2; exit 1; }
	touch $@

sysdeps: $(SYSDEPS_STAMP)

$(STAMP): pyproject.toml $(SYSDEPS_STAMP)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,systemd]'
	touch $@

run: $(STAMP)
	install -d -m 0755 $(RUNDIR)
	@# the daemon trusts only a config its own user (root) owns and no one else may write, in directories alike:
	@# a copy in a root dir, not the checkout's file
	install -m 0644 config/parlschedd.yaml $(RUNDIR)/parlschedd.yaml
	$(VENV)/bin/parlschedd --config $(RUNDIR)/parlschedd.yaml --socket $(RUNDIR)/parlschedd.sock --state-dir $(RUNDIR)

# pyflakes and bugbear (pyproject.toml [tool.ruff]): a method defined twice, an unused
# import, a loop variable a closure does not bind. .ci/run runs it before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check parlschedd parlschedctl tests bench e2e

test: $(STAMP)
	$(PY) -m pytest

test-all: $(STAMP)
	$(PY) -m pytest -m ''

# The slow tests alone (about 30 s): .ci/run runs them after make test, so they cannot rot unseen.
# Two of them unplug the last CPU for a few seconds (as root, where the kernel lets it),
# which undoes other programs' pins to that CPU: they run only with PARLSCHED_HOTPLUG=1
# in the environment, as .ci/run sets it on the machine CI owns.
test-slow: $(STAMP)
	$(PY) -m pytest -m slow

# Every benchmark, one after the other (about 45 minutes on 2 CPUs; run as root, on a
# quiet machine: the timings are the figures). Each writes its JSON under bench/results/.
bench: $(STAMP)
	$(PY) bench/sim_scale.py
	$(PY) bench/overhead.py
	$(PY) bench/overhead.py --paper
	$(PY) bench/period_profile.py
	$(PY) bench/cold_start.py
	$(PY) bench/energy_fit.py
	$(PY) bench/scenarios.py
	$(PY) bench/headroom.py

clean:
	rm -rf $(VENV) run build dist *.egg-info .pytest_cache .hypothesis
	@# make run's dir is root's (run, the checkout's own, was make run's before)
	if [ -e $(RUNDIR) ]; then rm -rf $(RUNDIR) || echo "$(RUNDIR) is root's: sudo rm -rf $(RUNDIR)"; fi

-include mk/*.mk
