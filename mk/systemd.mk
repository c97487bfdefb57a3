# systemd integration: make install / uninstall / e2e (docs/systemd.md).
# Included by the main Makefile; relies on its VENV, PY and STAMP for e2e only.
# install and uninstall need nothing from the development venv.

PARLSCHED_PREFIX ?= /opt/parlsched
INSTALL_VENV     ?= $(PARLSCHED_PREFIX)/venv
INSTALL_PYTHON   ?= python3
BINDIR           ?= /usr/local/bin
UNITDIR          ?= /usr/local/lib/systemd/system
SYSUSERSDIR      ?= /usr/local/lib/sysusers.d
CONFDIR          ?= /etc/parlsched
DOCDIR           ?= $(PARLSCHED_PREFIX)/share/doc
PARLSCHED_GROUP  ?= parlsched
# A built wheel to install; empty: build one from this source tree.
WHEEL            ?=
PURGE            ?= 0

# e2e: a cached Debian tree booted with systemd-nspawn (e2e/run.sh).
E2E_ROOT    ?= /var/tmp/parlsched-e2e-root
E2E_CACHE   ?= /var/tmp/parlsched-e2e-cache
E2E_WORK    ?= /var/tmp/parlsched-e2e-work
E2E_OUT     ?= $(CURDIR)/build/e2e
E2E_TIMEOUT ?= 840

SYSTEMD_RUNNING = test -d /run/systemd/system
IPIP = $(INSTALL_VENV)/bin/python -m pip --disable-pip-version-check -q

.PHONY: install uninstall e2e

install:
	@test "$$(id -u)" = 0 || { echo "make install: run as root (sudo make install)" >&2; exit 1; }
	@# The program first: a failed download leaves no group, config or unit half made.
	test -x $(INSTALL_VENV)/bin/python || $(INSTALL_PYTHON) -m venv $(INSTALL_VENV)
	set -e; whl='$(WHEEL)'; \
	if [ -z "$$whl" ]; then \
		rm -rf build/install-wheel build/lib build/bdist.*; \
		$(IPIP) wheel --no-deps -w build/install-wheel .; \
		whl=$$(ls build/install-wheel/parlsched-*.whl); \
	fi; \
	$(IPIP) install "$$whl"; \
	$(IPIP) install --no-deps --force-reinstall "$$whl"
	install -d -m 0755 $(SYSUSERSDIR) $(BINDIR) $(UNITDIR) $(CONFDIR) $(DOCDIR)
	install -m 0644 systemd/parlsched.sysusers.conf $(SYSUSERSDIR)/parlsched.conf
	if command -v systemd-sysusers >/dev/null 2>&1; then systemd-sysusers $(SYSUSERSDIR)/parlsched.conf; \
	else groupadd -f -r $(PARLSCHED_GROUP); fi
	getent group $(PARLSCHED_GROUP) >/dev/null
	ln -sfn $(INSTALL_VENV)/bin/parlschedd $(BINDIR)/parlschedd
	ln -sfn $(INSTALL_VENV)/bin/parlschedctl $(BINDIR)/parlschedctl
	@# The default config with the socket group set; an existing one is never replaced.
	if [ -e $(CONFDIR)/parlschedd.yaml ]; then \
		echo "keeping existing $(CONFDIR)/parlschedd.yaml"; \
	else \
		sed 's/^  group: null$$/  group: $(PARLSCHED_GROUP)/' config/parlschedd.yaml > $(CONFDIR)/.parlschedd.yaml.new && \
		grep -q '^  group: $(PARLSCHED_GROUP)$$' $(CONFDIR)/.parlschedd.yaml.new && \
		chmod 0644 $(CONFDIR)/.parlschedd.yaml.new && \
		mv $(CONFDIR)/.parlschedd.yaml.new $(CONFDIR)/parlschedd.yaml; \
	fi
	$(INSTALL_VENV)/bin/parlschedctl config check $(CONFDIR)/parlschedd.yaml
	sed -e 's|/opt/parlsched/venv|$(INSTALL_VENV)|g' -e 's|/opt/parlsched/share/doc|$(DOCDIR)|g' \
		-e 's|/etc/parlsched/|$(CONFDIR)/|g' systemd/parlschedd.service > $(UNITDIR)/.parlschedd.service.new
	chmod 0644 $(UNITDIR)/.parlschedd.service.new
	mv $(UNITDIR)/.parlschedd.service.new $(UNITDIR)/parlschedd.service
	test ! -f docs/systemd.md || install -m 0644 docs/systemd.md $(DOCDIR)/systemd.md
	if $(SYSTEMD_RUNNING); then systemctl daemon-reload; fi
	@if ! $(SYSTEMD_RUNNING); then echo "installed; systemd is not running here (not PID 1), so start it by hand:" \
		"$(BINDIR)/parlschedd --config $(CONFDIR)/parlschedd.yaml (docs/systemd.md, Without systemd)"; \
	elif systemctl --quiet is-active parlschedd.service; then \
		echo "installed; parlschedd is still running the old version: systemctl restart parlschedd"; \
	else echo "installed; start it with: systemctl enable --now parlschedd"; fi

uninstall:
	@test "$$(id -u)" = 0 || { echo "make uninstall: run as root (sudo make uninstall)" >&2; exit 1; }
	@# Stopping the daemon puts every managed thread back on its original mask.
	if $(SYSTEMD_RUNNING); then systemctl disable --now parlschedd.service 2>/dev/null || true; \
	elif command -v systemctl >/dev/null 2>&1; then systemctl disable parlschedd.service 2>/dev/null || true; fi
	rm -f $(UNITDIR)/parlschedd.service $(UNITDIR)/.parlschedd.service.new
	for c in parlschedd parlschedctl; do \
		if [ "$$(readlink $(BINDIR)/$$c)" = "$(INSTALL_VENV)/bin/$$c" ]; then rm -f $(BINDIR)/$$c; fi; \
	done
	@# Only a directory that is a virtual environment is removed.
	if [ -f $(INSTALL_VENV)/pyvenv.cfg ]; then rm -rf $(INSTALL_VENV); fi
	rm -f $(DOCDIR)/systemd.md
	-rmdir $(DOCDIR) $(PARLSCHED_PREFIX)/share $(PARLSCHED_PREFIX) 2>/dev/null; true
	rm -f $(SYSUSERSDIR)/parlsched.conf
	@# The directories install made, when nothing else is in them.
	-rmdir $(UNITDIR) $(patsubst %/,%,$(dir $(UNITDIR))) $(SYSUSERSDIR) 2>/dev/null; true
	if $(SYSTEMD_RUNNING); then systemctl daemon-reload; fi
	if [ "$(PURGE)" = 1 ]; then \
		rm -rf $(CONFDIR); \
		if getent group $(PARLSCHED_GROUP) >/dev/null; then groupdel $(PARLSCHED_GROUP); fi; \
	else \
		echo "kept $(CONFDIR) and group $(PARLSCHED_GROUP) (PURGE=1 removes them)"; \
	fi

# Boots a real systemd in a container and checks the unit end to end; the host test
# tests/e2e/test_systemd.py runs e2e/run.sh and asserts every check it recorded. When
# they pass, the unit's exposure score goes to bench/results/e2e-security.json (from the
# result checked: PARLSCHED_E2E_RESULT's when set, as the test reads it).
e2e: $(STAMP)
	PARLSCHED_E2E=1 E2E_ROOT=$(E2E_ROOT) E2E_CACHE=$(E2E_CACHE) E2E_WORK=$(E2E_WORK) \
	E2E_OUT=$(E2E_OUT) E2E_TIMEOUT=$(E2E_TIMEOUT) E2E_PY=$(abspath $(PY)) \
		$(PY) -m pytest -s -p no:cacheprovider -m e2e tests/e2e
	$(PY) bench/e2e_security.py "$${PARLSCHED_E2E_RESULT:-$(E2E_OUT)/result.json}"
