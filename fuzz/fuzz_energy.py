"""Byte-level coverage-guided fuzzer (atheris/libFuzzer) for the energy model's loaders.

Property: for any bytes, ``load_cluster``, ``load_measurements`` and ``load_params``
return a value or raise their own error (ClusterError, MeasurementsError, ParamsError),
whose message the CLI prints as one line; never anything else (a TypeError, a
KeyError, a bare ValueError: a traceback, or a message that names no file or key).
The first byte picks the loader; the rest is the file. ``make fuzz`` seeds it with
the shared HPMoon cluster and measurements, read in place (``seeds``).

    .venv/bin/python fuzz/fuzz_energy.py -max_total_time=60 CORPUS_DIR
"""

import contextlib
import os
import sys

try:
    import atheris
except ImportError:  # run.py's fallback (random mutation) calls test_one_input without it
    atheris = None

with (atheris.instrument_imports(include=["parlschedd.energy", "parlschedd.textfile", "parlschedd.kinds"]) if atheris
      else contextlib.nullcontext()):
    from parlschedd.energy.cluster import ClusterError, load_cluster
    from parlschedd.energy.measurements import MeasurementsError, load_measurements
    from parlschedd.energy.store import ParamsError, load_params

LOADERS = ((load_cluster, ClusterError), (load_measurements, MeasurementsError), (load_params, ParamsError))
# the file each input is written to: in memory, gone with the process (libFuzzer's exit runs no atexit)
FILE = os.memfd_create("fuzz-energy-input")
PATH = f"/proc/self/fd/{FILE}"


def test_one_input(data: bytes) -> None:
    if not data:
        return
    load, error = LOADERS[data[0] % len(LOADERS)]
    os.ftruncate(FILE, 0)
    os.pwrite(FILE, data[1:], 0)
    try:
        load(PATH)
    except error as exc:
        if not str(exc):
            raise AssertionError(f"{type(exc).__name__} without a message") from None


def seeds() -> dict[str, bytes]:
    """A seed per loader from the shared data (bench/shared.py finds it): each file
    after the byte that picks its loader. No params file is shared: the fuzzer reaches
    load_params with the others' bytes."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    from shared import ENERGY_DATA

    return {"cluster": b"\x00" + (ENERGY_DATA / "cluster-hpmoon.yaml").read_bytes(),
            "measurements": b"\x01" + (ENERGY_DATA / "hpmoon_v3_measurements.csv").read_bytes()}


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
