# make fuzz: the three fuzzers (fuzz/run.py) for FUZZ_SECONDS in total; installs atheris
# into the venv when missing (fuzz/run.py falls back to random mutation without it).
FUZZ_SECONDS ?= 60

fuzz: $(STAMP)
	$(PY) -c 'import atheris' 2>/dev/null || $(PY) -m pip install -q atheris || echo "atheris unavailable: random-mutation fallback"
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)
