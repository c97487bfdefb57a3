"""PARAMS.json: a fitted proposed model, the fitted baseline and the cluster they belong to.

The file is self-contained (it carries the cluster, and the NSp the model was fitted
on), so ``predict`` and ``recommend`` need nothing else. ``load_params`` checks the
format and names the file in its errors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from parlschedd import textfile
from parlschedd.atomicfile import replace_text
from parlschedd.cpulist import format_cpulist
from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import Cluster, ClusterError, cluster_to_dict, parse_cluster, without_individuals
from parlschedd.energy.estimator import EnergyTimeModel
from parlschedd.energy.model import NotANumber
from parlschedd.keypaths import yaml_kind
from parlschedd.kinds import is_integer

FORMAT = "parlsched-energy-time/1"
MAX_FILE_BYTES = 16 << 20  # a cluster file's limit (1 MiB) of devices, each with its fitted parameters and spreads

T = TypeVar("T")


class ParamsError(ValueError):
    """A parameters file that cannot be used."""


@dataclass(frozen=True)
class Fitted:
    cluster: Cluster
    model: EnergyTimeModel
    baseline: BaselineModel
    extra: dict[str, Any]
    # The NSp the model was fitted on, ascending; None in a file written before they
    # were recorded.
    fitted_nsp: tuple[int, ...] | None = None
    # Those of them whose energy was measured, which the energy phase was fitted on
    # (fewer where some runs have no energy); None: no energy fitted, or a file written
    # before they were recorded, whose energy is taken as fitted on fitted_nsp.
    energy_fitted_nsp: tuple[int, ...] | None = None

    def extrapolated(self, nsp: Sequence[int] | np.ndarray, energy: bool = False) -> np.ndarray | None:
        """Per NSp, whether it is below or above every NSp the model was fitted on. There
        the model extrapolates, and nothing bounds its error (docs/energy-time-model.md).
        With ``energy``, whether the runtime or the energy is extrapolated: the energy
        (eq. 7) is fitted on the NSp with a measured energy alone, and it is computed from
        the runtime. None when the file does not say what the model was fitted on."""
        if self.fitted_nsp is None:
            return None
        ks = np.asarray(nsp)
        outside = (ks < self.fitted_nsp[0]) | (ks > self.fitted_nsp[-1])
        if energy and self.energy_fitted_nsp is not None:
            outside |= (ks < self.energy_fitted_nsp[0]) | (ks > self.energy_fitted_nsp[-1])
        return outside

    def nearest_fitted(self, nsp: int, energy: bool = False) -> int | None:
        """The NSp the model was fitted on nearest to ``nsp`` (the lower of two as
        near; with ``energy``, of those whose energy was fitted); None when the file
        does not say. Between fitted NSp far apart the model interpolates, and its
        error there is no better known than outside them."""
        fitted_on = self.energy_fitted_nsp if energy and self.energy_fitted_nsp is not None else self.fitted_nsp
        if fitted_on is None:
            return None
        return min(fitted_on, key=lambda k: (abs(k - nsp), k))


def params_document(cluster: Cluster, model: EnergyTimeModel, baseline: BaselineModel,
                    extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters file of ``model`` and ``baseline``, fitted to the same runs."""
    return {"format": FORMAT, "cluster": cluster_to_dict(cluster), "model": model.to_dict(),
            "baseline": baseline.to_dict(), "fitted_nsp": list(model.fitted_nsp_),
            **({"energy_fitted_nsp": list(model.energy_fitted_nsp_)} if model.energy_fitted_nsp_ is not None else {}),
            **(extra or {})}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None, so that it dumps as standard
    JSON (NaN and Infinity are not: other readers refuse them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def save_params(path: str | Path, document: dict[str, Any]) -> None:
    """Replace ``path`` whole: a fit interrupted while writing leaves the old file."""
    replace_text(path, json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n")


class _RepeatedKey(ValueError):
    """A key written twice in one JSON object."""


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each written once: json keeps the last of two
    silently, so a value pasted into a file edited by hand was read or ignored unseen
    (the cluster's YAML refuses its repeated keys alike)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def load_params(path: str | Path) -> Fitted:
    source = str(path)
    try:
        doc = json.loads(textfile.decode(textfile.read(path, MAX_FILE_BYTES, pipes=True).data), object_pairs_hook=_once_each)
    except OSError as exc:
        raise ParamsError(f"{source}: cannot read: {exc.strerror}") from exc  # the CLI's io_error
    except textfile.TooLarge as exc:
        raise ParamsError(f"{source}: {exc}: not a parameters file (`model fit --out` writes 8 KB for 6 devices)") from None
    except textfile.NotUtf8 as exc:
        raise ParamsError(f"{source}:{exc.line}: not UTF-8 text (byte 0x{exc.byte:02x}): not a parameters file; "
                          "--params takes the file `model fit --out` writes") from None
    except json.JSONDecodeError as exc:  # most often another input given as --params: the cluster, the CSV
        raise ParamsError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg}; --params takes the file "
                          "`model fit --out` writes") from exc
    except _RepeatedKey as exc:
        raise ParamsError(f"{source}: the key {str(exc)[:60]!r} is written twice in one object (json reads the last "
                          "alone): keep the one meant") from None
    except RecursionError:  # a traceback from a file of 6 KB
        raise ParamsError(f"{source}: not a parameters file: nested too deeply (lists or objects inside one another "
                          "hundreds of levels down)") from None
    written = doc.get("format") if isinstance(doc, dict) else None
    if isinstance(written, str) and written != FORMAT and written.startswith(FORMAT.split("/")[0] + "/"):
        raise ParamsError(f"{source}: a parameters file of format {written[:60]!r}, which this parlsched does "
                          f"not read (it reads {FORMAT}): written by another version; fit again with this one")
    if written != FORMAT:
        raise ParamsError(f"{source}: not a parameters file of format {FORMAT} (write one with `model fit --out`)")
    try:
        cluster = parse_cluster(doc["cluster"], f"{source}: cluster")
    except ClusterError as exc:
        raise ParamsError(str(exc)) from exc
    except KeyError as exc:  # str() of a KeyError is the bare key
        raise ParamsError(f"{source}: malformed parameters: missing key {exc} (write the file with `model fit --out`)") from exc
    model = _section(doc, "model", source, lambda d: EnergyTimeModel.from_dict(cluster, d))
    baseline = _section(doc, "baseline", source, lambda d: BaselineModel.from_dict(cluster, d))
    extra = {k: v for k, v in doc.items()
             if k not in {"format", "cluster", "model", "baseline", "fitted_nsp", "energy_fitted_nsp"}}
    fitted_nsp = _fitted_nsp(doc.get("fitted_nsp"), cluster, source)
    energy_fitted_nsp = _fitted_nsp(doc.get("energy_fitted_nsp"), cluster, source, "energy_fitted_nsp")
    if fitted_nsp and energy_fitted_nsp:
        beyond = [k for k in energy_fitted_nsp if not fitted_nsp[0] <= k <= fitted_nsp[-1]]
        if beyond:  # the energy is fitted on runs the model was fitted on
            raise ParamsError(f"{source}: energy_fitted_nsp: nsp {format_cpulist(beyond)} outside fitted_nsp "
                              f"({fitted_nsp[0]}-{fitted_nsp[-1]}): the energy is fitted on some of the runs the "
                              "model was fitted on (write the file with `model fit --out`)")
    return Fitted(cluster, model, baseline, extra, fitted_nsp, energy_fitted_nsp)


def _section(doc: dict[str, Any], key: str, source: str, read: Callable[[Any], T]) -> T:
    """``read`` of the section ``key`` of ``doc``, its errors naming the key path in the
    file: "missing key 'rounding'" did not say of which section. A section that is not
    an object is refused as such, in the file's words: "model": [] said "model: list
    indices must be integers or slices, not str"."""
    if key in doc and not isinstance(doc[key], dict):
        raise ParamsError(f"{source}: malformed parameters: {key}: must be an object, got {yaml_kind(doc[key])} "
                          "(write the file with `model fit --out`)")
    try:
        return read(doc[key])
    except KeyError as exc:
        name = exc.args[0] if exc.args[0] == key else f"{key}.{exc.args[0]}"
        raise ParamsError(f"{source}: malformed parameters: missing key '{name}' "
                          "(write the file with `model fit --out`)") from exc
    except NotANumber as exc:  # its message starts with its key path in the section
        raise ParamsError(f"{source}: malformed parameters: {key}.{exc}") from exc
    except (TypeError, ValueError, OverflowError) as exc:
        raise ParamsError(f"{source}: malformed parameters: {key}: {exc}") from exc


def _fitted_nsp(value: Any, cluster: Cluster, source: str, key: str = "fitted_nsp") -> tuple[int, ...] | None:
    """The file's ``fitted_nsp`` (or ``energy_fitted_nsp``), ascending; None where it has
    none (written before it was recorded: read as it was, without knowing what is
    extrapolated). An NSp above
    the cluster's run.individuals is refused: a subpopulation needs an individual
    (spec: PE = N / NSp), so no model was fitted there, and the extrapolation range
    read from it would hide every extrapolated NSp up to it."""
    if value is None:
        return None
    if (not isinstance(value, list) or not value
            or not all(is_integer(k) and k >= 1 for k in value)):
        raise ParamsError(f"{source}: {key}: must be a non-empty list of integers >= 1 (the NSp the model "
                          f"was fitted on), got {value!r} (write the file with `model fit --out`)")
    individuals = cluster.run.individuals
    if above := without_individuals(cluster.run, sorted(set(value))):
        raise ParamsError(f"{source}: {key}: nsp {format_cpulist(above)} above cluster.run.individuals "
                          f"({individuals}): each subpopulation needs at least one individual, so the NSp fitted "
                          f"on are at most {individuals} (write the file with `model fit --out`)")
    return tuple(sorted(value))
