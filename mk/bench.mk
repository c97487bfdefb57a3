# make bench-scenarios: the paper's experiment on this machine (bench/scenarios.py):
# real workloads under the plain kernel and under parlschedd, interleaved A B A B.
# Needs root (the daemon pins threads); installs sysbench/stress-ng when missing.
# SCENARIOS_ARGS, e.g. "--quick" or "--reps 7 --scenarios 'cpu-.*'".
SCENARIOS_ARGS ?=

bench-scenarios: $(STAMP)
	$(PY) bench/scenarios.py $(SCENARIOS_ARGS)

.PHONY: bench-scenarios
