"""The cluster description: run constants, master, switch, worker nodes and devices.

A frozen dataclass tree read from YAML (shared/data/energy-time/cluster-hpmoon.yaml is
the reference). ``parse_cluster`` collects every problem with its key path
(``nodes[1].devices[0].compute_units: must be an integer >= 1, got 0``) so a user can fix
a file in one go. The flattened device arrays (``compute_units``, ``frequency_hz``,
``tdp_w``) are what the vectorised model consumes; device order is node order, then the
order inside the node, which is also the initial order of Algorithm 1's list L.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from parlschedd import textfile
from parlschedd.cpulist import format_cpulist
from parlschedd.keypaths import Collector, KeyPathError, load_yaml, yaml12_number, yaml_kind
from parlschedd.kinds import is_integer, is_number


class ClusterError(KeyPathError):
    """A cluster file that cannot be used; ``errors`` lists (key path, message) pairs."""


class NspError(ValueError):
    """NSp values above run.individuals: subpopulations of no one, where the model's
    figures mean nothing; or, by default, above MAX_NSP."""


# Far above any GA's split of its population (the paper's: 1-32); the simulated
# distribution (Algorithm 1) of every NSp up to it takes seconds, its cost growing with
# the square of the range.
MAX_NSP = 10_000


DEFAULT_SUBPOPULATIONS = (1, 32)  # the paper's span

MAX_FILE_BYTES = 1 << 20  # a cluster of thousands of nodes written out one by one is a few hundred KB


@dataclass(frozen=True)
class PhysicalRange:
    """The values a physical quantity of the file can take (inclusive), in ``unit``,
    ``said`` in words, and the likely mistake behind a value below or above them."""

    low: float
    high: float
    unit: str
    said: str
    too_low: str
    too_high: str


# Far wider than any real device, master or switch: outside them a value is a unit mistake
# or a typo, which the model took (a TDP of 1e9 W, a clock of 1e15 Hz) and fitted powers
# and speeds to.
TDP_RANGE = PhysicalRange(1.0, 100e3, "W", "1 W to 100 kW", "a TDP in kW rather than W? give it in watts",
                          "a TDP in mW rather than W, or mistyped? give it in watts")
FREQUENCY_RANGE = PhysicalRange(10e6, 100e9, "Hz", "10 MHz to 100 GHz",
                                "a clock in GHz, MHz or kHz rather than Hz? 2.1 GHz is 2.1e9",
                                "mistyped (an exponent too large?); 2.1 GHz is 2.1e9")


@dataclass(frozen=True)
class RunSettings:
    """The GA being modelled: N, g, NGm, alpha and the NSp range of interest."""

    individuals: int
    generations: int
    global_migrations: int
    crossover_probability: float
    subpopulations: tuple[int, int] = DEFAULT_SUBPOPULATIONS


@dataclass(frozen=True)
class Device:
    """Device j of a node: C_ij compute units at F_ij Hz, with a TDP bounding its power.
    ``kind`` (cpu, gpu, ...) is free text, a label for people: the model reads no kind
    (eqs. 1-7 treat every device alike), so a set of kinds would refuse an accelerator
    the model handles as well as any."""

    name: str
    kind: str
    compute_units: int
    frequency_hz: float
    tdp_w: float


@dataclass(frozen=True)
class Node:
    name: str
    devices: tuple[Device, ...]


@dataclass(frozen=True)
class Cluster:
    run: RunSettings
    master_tdp_w: float
    switch_tdp_w: float
    nodes: tuple[Node, ...]
    master_cpu_threads: int | None = None
    master_frequency_hz: float | None = None

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(d for n in self.nodes for d in n.devices)

    @property
    def device_labels(self) -> tuple[str, ...]:
        """``node.device`` for every device, in model order."""
        return tuple(f"{n.name}.{d.name}" for n in self.nodes for d in n.devices)

    @property
    def node_of_device(self) -> np.ndarray:
        """Index of the node of every device (the baseline aggregates by node)."""
        return np.array([i for i, n in enumerate(self.nodes) for _ in n.devices])

    @property
    def compute_units(self) -> np.ndarray:
        return np.array([d.compute_units for d in self.devices], dtype=float)

    @property
    def frequency_hz(self) -> np.ndarray:
        return np.array([d.frequency_hz for d in self.devices], dtype=float)

    @property
    def tdp_w(self) -> np.ndarray:
        return np.array([d.tdp_w for d in self.devices], dtype=float)


def without_individuals(run: RunSettings, nsp: Iterable[int]) -> list[int]:
    """The NSp above run.individuals, in the order given."""
    return [int(k) for k in nsp if k > run.individuals]


def nsp_candidates(run: RunSettings, nsp: Sequence[int] | None = None) -> np.ndarray:
    """The NSp asked for (default: run.subpopulations, low to high); NspError when one
    is above run.individuals, or when the default goes above MAX_NSP (the NSp asked for
    are held to it where they are parsed: a span of [1, 200000] ran for minutes)."""
    lo, hi = run.subpopulations
    if not nsp and hi > MAX_NSP:  # as below, no NSp is the default
        raise NspError(f"run.subpopulations [{lo}, {hi}] goes above {MAX_NSP} subpopulations, too many to predict "
                       "in reasonable time; ask for the NSp wanted")
    ks = np.array(nsp or range(lo, hi + 1))
    above = without_individuals(run, ks)
    if above:  # every one, folded (1-5000 is "3841-5000"), and the limit: the largest alone hid both
        raise NspError(f"nsp {format_cpulist(above)} above {run.individuals} (the cluster's run.individuals): each "
                       f"subpopulation needs at least one individual; give NSp <= {run.individuals}")
    return ks


def check_measured(run: RunSettings, nsp: Iterable[int], source: str) -> None:
    """Measured NSp, as the NSp asked for (``nsp_candidates``), must have individuals:
    NspError naming ``source`` and every NSp above run.individuals."""
    above = without_individuals(run, nsp)
    if above:
        raise NspError(f"{source}: nsp {', '.join(map(str, above))} above the cluster's run.individuals "
                       f"({run.individuals}): each subpopulation needs at least one individual")


_WITH_UNIT = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*[A-Za-z]+\s*$")  # 2.1GHz, 80 W
_KEY_UNITS = {"hz": "Hz", "w": "W", "s": "s", "wh": "Wh"}  # a key's suffix: the unit of its value


def _unit_hint(value: object, key: str) -> str:
    """For a number written with a unit ('2.1GHz', '80 W'): the number alone goes in
    the value, in the unit the key's name says (frequency_hz: 2.1e9)."""
    if not isinstance(value, str) or not _WITH_UNIT.match(value):
        return ""
    unit = _KEY_UNITS.get(key.rpartition("_")[2])
    return ": write the number alone" + (f", in {unit} as the key's name says" if unit else "")


class _Reader(Collector):
    """The cluster's typed getters: a missing or wrong value is an error, and None or the
    default stands in for it."""

    def number(self, data: Mapping[str, Any], key: str, path: str, *, integer: bool = False,
               low: float | None = None, high: float | None = None, above: float | None = None,
               required: bool = True) -> Any:
        """The value at ``key``: low and high inclusive bounds, ``above`` an exclusive one."""
        where = f"{path}.{key}" if path else key
        if key not in data:
            if required:
                self.fail(where, "is required")
            return None
        value = data[key] if integer else yaml12_number(data[key])
        kind = "an integer" if integer else "a number"
        ok = is_integer(value) if integer else is_number(value)
        if not ok or (not is_integer(value) and not math.isfinite(value)):  # numpy's floats too
            self.fail(where, f"must be {kind}, got {value!r}" + _unit_hint(value, key))
            return None
        if is_integer(value) and abs(value) > sys.float_info.max:  # the model computes in floats, which it overflows
            # (math.isfinite raised OverflowError); not shown, it has hundreds of digits
            self.fail(where, f"must be {kind} of at most {sys.float_info.max:.2g}, got a larger one")
            return None
        if ((low is not None and value < low) or (above is not None and value <= above)
                or (high is not None and value > high)):
            self.fail(where, f"must be {kind} {_interval(low, above, high)}, got {value!r}")
            return None
        return int(value) if integer else float(value)

    def physical(self, value: float | None, where: str, bounds: PhysicalRange) -> float | None:
        """``value`` when inside ``bounds``, else an error at ``where`` saying the range
        and the likely mistake on the side ``value`` is off, and None."""
        if value is None or bounds.low <= value <= bounds.high:
            return value
        mistake = bounds.too_low if value < bounds.low else bounds.too_high
        self.fail(where, f"must be between {bounds.low:g} and {bounds.high:g} {bounds.unit} ({bounds.said}), "
                         f"got {value:g}: {mistake}")
        return None

    def tdp(self, data: Mapping[str, Any], key: str, path: str) -> float | None:
        """A TDP in W, inside TDP_RANGE."""
        value = self.number(data, key, path, above=0.0)  # the power parameters' bounds are fractions of it
        return self.physical(value, f"{path}.{key}", TDP_RANGE)

    def frequency(self, data: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> float | None:
        """A clock frequency in Hz, inside FREQUENCY_RANGE."""
        value = self.number(data, key, path, above=0.0, required=required)  # a clock in GHz gets the range's hint
        return self.physical(value, f"{path}.{key}", FREQUENCY_RANGE)

    def text(self, data: Mapping[str, Any], key: str, path: str, default: str) -> str:
        value = data.get(key, default)
        if not isinstance(value, str) or not value:
            self.fail(f"{path}.{key}", f"must be a non-empty string, got {value!r}")
            return default
        return value


def _interval(low: float | None, above: float | None, high: float | None) -> str:
    """The values ``number`` takes, as its refusal says them: ``low`` and ``high``
    inclusive, ``above`` exclusive (so that (0, 1] is not said [0.0, 1.0], which 0 is in)."""
    if high is None:
        return f">= {low}" if above is None else f"> {above:g}"
    return f"in [{low}, {high}]" if above is None else f"in ({above:g}, {high:g}]"


def _run(r: _Reader, data: Mapping[str, Any]) -> RunSettings | None:
    if "run" not in data:
        r.fail("run", "is required")
        return None
    run = r.section(data["run"], "run", _keys(RunSettings))
    n = r.number(run, "individuals", "run", integer=True, low=1)
    g = r.number(run, "generations", "run", integer=True, low=1)
    ngm = r.number(run, "global_migrations", "run", integer=True, low=1)
    # Above 0: at 0, eq. 1's PE = (N / NSp) * alpha is 0 and the model has no evolution
    # time at all (a GA that never crosses over is not the one modelled)
    alpha = r.number(run, "crossover_probability", "run", above=0.0, high=1.0)
    span = run.get("subpopulations", list(DEFAULT_SUBPOPULATIONS))
    ok_span = (isinstance(span, list) and len(span) == 2 and all(is_integer(v) and v >= 1 for v in span)
               and span[0] <= span[1])  # not [true, 32]: a bool is an int to isinstance
    if not ok_span:
        r.fail("run.subpopulations", f"must be [low, high] with 1 <= low <= high, got {span!r}")
    if g is not None and ngm is not None and g % ngm:
        r.fail("run.global_migrations", f"must divide generations ({g}), got {ngm}")
    if ok_span and n is not None and span[1] > n:
        if "subpopulations" in run:
            r.fail("run.subpopulations", f"must not go above run.individuals ({n}): each subpopulation "
                                         f"needs at least one individual, got {span!r}")
        else:  # the default, which the user never wrote
            r.fail("run.subpopulations", f"is not given, and its default {list(DEFAULT_SUBPOPULATIONS)} goes above "
                                         f"run.individuals ({n}): set it, e.g. subpopulations: [1, {n}]")
        ok_span = False
    if None in (n, g, ngm, alpha) or not ok_span:
        return None
    return RunSettings(n, g, ngm, alpha, (span[0], span[1]))


def _device(r: _Reader, raw: Any, path: str, index: int) -> Device | None:
    d = r.section(raw, path, _keys(Device))
    if not isinstance(raw, Mapping):  # noted by section(): nothing under it to read
        return None
    cu = r.number(d, "compute_units", path, integer=True, low=1)
    f = r.frequency(d, "frequency_hz", path)
    tdp = r.tdp(d, "tdp_w", path)
    name = r.text(d, "name", path, f"dev{index + 1}")
    kind = r.text(d, "kind", path, "cpu")
    return None if None in (cu, f, tdp) else Device(name, kind, cu, f, tdp)


def _nodes(r: _Reader, data: Mapping[str, Any]) -> tuple[Node, ...]:
    raw = data.get("nodes")
    if not isinstance(raw, list) or not raw:
        r.fail("nodes", "must be a non-empty list of worker nodes")
        return ()
    nodes = []
    labelled: dict[str, list[tuple[str, str, str]]] = {}  # label: (key path, node, device) of each device
    for i, raw_node in enumerate(raw):
        path = f"nodes[{i}]"
        node = r.section(raw_node, path, _keys(Node))
        devices = node.get("devices")
        if not isinstance(devices, list) or not devices:
            r.fail(f"{path}.devices", "must be a non-empty list of devices")
            continue
        built = [_device(r, dev, f"{path}.devices[{j}]", j) for j, dev in enumerate(devices)]
        _unique(r, [d.name for d in built if d], f"{path}.devices", "device")
        nodes.append(Node(r.text(node, "name", path, f"node{i + 1}"), tuple(d for d in built if d)))
        for j, d in enumerate(built):
            if d:
                labelled.setdefault(f"{nodes[-1].name}.{d.name}", []).append(
                    (f"{path}.devices[{j}]", nodes[-1].name, d.name))
    _unique(r, [n.name for n in nodes], "nodes", "node")
    _distinct_labels(r, labelled)
    return tuple(nodes)


def _distinct_labels(r: _Reader, labelled: dict[str, list[tuple[str, str, str]]]) -> None:
    """Fitted parameters are keyed by ``node.device`` (``W[node1.gpu]``): node ``a.b``
    with device ``c`` and node ``a`` with device ``b.c`` are both ``a.b.c``, and a fit
    kept one device's parameters for both and wrote a file that predict refused. Devices
    that share their node's and their own name are ``_unique``'s, not repeated here."""
    for label, devices in labelled.items():
        first: dict[tuple[str, str], str] = {}  # (node, device): the key path of its first device
        for where, node, device in devices:
            first.setdefault((node, device), where)
        if len(first) > 1:
            which = " and ".join(f"{where} (node {node!r}, device {device!r})" for (node, device), where in first.items())
            r.fail("nodes", f"{which} have the same label {label!r} (node.device), which names their fitted "
                            "parameters: rename one")


def _keys(section: type) -> set[str]:
    """The keys of a section of the file: the fields of the dataclass it is read into."""
    return {f.name for f in fields(section)}


def _unique(r: _Reader, names: list[str], path: str, what: str) -> None:
    """Fitted parameters are keyed by node and device name: a repeated name would
    merge two sets into one and leave a params file that matches no cluster."""
    for name in sorted({n for n in names if names.count(n) > 1}):
        r.fail(path, f"the {what} name {name!r} appears {names.count(name)} times; names must be unique")


SECTIONS = ("run", "master", "switch", "nodes")  # a cluster description's keys, each required
_SECTIONS = f"a mapping with the keys {', '.join(SECTIONS[:-1])} and {SECTIONS[-1]}"


def parse_cluster(data: Any, source: str = "<cluster>") -> Cluster:
    """Validate a parsed YAML document; raise ClusterError listing every problem."""
    if not isinstance(data, Mapping):  # nothing in it to read: one error, not one per key it lacks
        raise ClusterError(source, [("<top>", f"must be {_SECTIONS}, got {yaml_kind(data)}")])
    r = _Reader()
    run = _run(r, data)
    master = r.mapping(data.get("master", {}), "master")
    switch = r.mapping(data.get("switch", {}), "switch")
    r.only_known(master, "master", {"tdp_w", "cpu_threads", "frequency_hz"})
    r.only_known(switch, "switch", {"tdp_w"})
    master_tdp = r.tdp(master, "tdp_w", "master")
    switch_tdp = r.tdp(switch, "tdp_w", "switch")
    threads = r.number(master, "cpu_threads", "master", integer=True, low=1, required=False)
    freq = r.frequency(master, "frequency_hz", "master", required=False)
    nodes = _nodes(r, data)
    r.only_known(data, "", set(SECTIONS))
    if r.errors:
        raise ClusterError(source, r.errors)
    return Cluster(run, master_tdp, switch_tdp, nodes, threads, freq)


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file; errors name the file and the key path."""
    source = str(path)
    try:
        text = textfile.decode(textfile.read(path, MAX_FILE_BYTES, pipes=True).data)
    except OSError as exc:
        raise ClusterError(source, [("<file>", f"cannot read: {exc.strerror}")]) from exc  # the CLI's io_error
    except textfile.TooLarge as exc:
        raise ClusterError(source, [("<file>", f"{exc}, more than any cluster description needs: is it the right "
                                               "file?")]) from None
    except textfile.NotUtf8 as exc:
        raise ClusterError(source, [(f"line {exc.line}", str(exc))]) from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "<file>"
        raise ClusterError(source, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from exc
    if data is None:
        raise ClusterError(source, [("<file>", f"empty (nothing but blanks or comments): a cluster description is "
                                               f"{_SECTIONS}")])
    if isinstance(data, dict) and {"format", "cluster"} <= data.keys():  # was ten "unknown key" errors
        raise ClusterError(source, [("<file>", "a parameters file, as `model fit --out` writes (given with --params), "
                                               "not a cluster description: --cluster takes the cluster's YAML file")])
    return parse_cluster(data, source)


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """The YAML/JSON form that ``parse_cluster`` reads back (a fitted model carries it)."""
    run = cluster.run
    master: dict[str, Any] = {"tdp_w": cluster.master_tdp_w}
    if cluster.master_cpu_threads is not None:
        master["cpu_threads"] = cluster.master_cpu_threads
    if cluster.master_frequency_hz is not None:
        master["frequency_hz"] = cluster.master_frequency_hz
    return {
        "run": {"individuals": run.individuals, "generations": run.generations,
                "global_migrations": run.global_migrations,
                "crossover_probability": run.crossover_probability,
                "subpopulations": list(run.subpopulations)},
        "master": master,
        "switch": {"tdp_w": cluster.switch_tdp_w},
        "nodes": [{"name": n.name, "devices": [
            {"name": d.name, "kind": d.kind, "compute_units": d.compute_units,
             "frequency_hz": d.frequency_hz, "tdp_w": d.tdp_w} for d in n.devices]} for n in cluster.nodes],
    }
