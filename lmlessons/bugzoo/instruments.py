"""The instruments of the bug zoo: what a practitioner reads off a run, beside a healthy run.

An :class:`Instrument` is one column of lesson 08's symptom table: for each model family it
reads one number of a run's :func:`~lmlessons.bugzoo.records.summary` (or none: not
measured for that family). :func:`symptom` turns the number of a run and of its healthy
reference into one of a few signs, by one rule for every instrument:

* ``"≈"``: within :data:`TOLERANCE` (5%) of the healthy run's value;
* ``"↑"`` / ``"↓"``: further above / below it;
* ``"↑↑"`` / ``"↓↓"``: at least twice / at most half of it;
* ``"NaN"``: NaN where the healthy run's is not; ``"—"``: not measured for the family.

Values below an instrument's ``floor`` count as the floor (a one-step difference of 1e-7 and one
of 1e-6 are both float rounding, not a symptom). :func:`symptoms` gives a run's signs for
every instrument, and :func:`distance` counts the instruments on which two runs' signs differ:
the tests check that every case differs from every other case (and from a run with no
symptom) on at least two instruments, so that no diagnosis rests on one number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from lmlessons.bugzoo.data import content

__all__ = [
    "TOLERANCE",
    "NOT_MEASURED",
    "Instrument",
    "INSTRUMENTS",
    "symptom",
    "symptoms",
    "distance",
]

TOLERANCE = 0.05
NOT_MEASURED = "—"


@dataclass(frozen=True)
class Instrument:
    """One column of the symptom table: ``metrics`` maps a model family to the summary metric
    it reads (a family not in it: not measured); values below ``floor`` count as ``floor``."""

    id: str
    label: str
    metrics: Mapping[str, str] = field(default_factory=dict)
    floor: float = 0.0

    def metric(self, family: str) -> str | None:
        """The summary metric this instrument reads for ``family`` (None: not measured)."""
        return self.metrics.get(family)


INSTRUMENTS: tuple[Instrument, ...] = tuple(
    Instrument(instrument_id, entry["label"], entry["metrics"], entry.get("floor", 0.0))
    for instrument_id, entry in content()["instruments"].items()
)


def symptom(value: float | None, reference: float | None, floor: float = 0.0) -> str:
    """The sign of ``value`` against the healthy ``reference`` (see the module docstring)."""
    if value is None or reference is None:
        return NOT_MEASURED
    if math.isnan(value) or math.isnan(reference):
        return "≈" if math.isnan(value) and math.isnan(reference) else "NaN"
    a, b = max(abs(value), floor), max(abs(reference), floor)
    if b == 0:
        return "≈" if a == 0 else "↑↑"
    if a >= 2 * b:
        return "↑↑"
    if a * 2 <= b:
        return "↓↓"
    if a > b * (1 + TOLERANCE):
        return "↑"
    if a < b * (1 - TOLERANCE):
        return "↓"
    return "≈"


def symptoms(
    family: str, run: Mapping[str, float], reference: Mapping[str, float]
) -> dict[str, str]:
    """Every instrument's sign for a run of ``family`` (its summary ``run``) against its
    healthy ``reference``: ``{instrument id: sign}``."""
    out = {}
    for instrument in INSTRUMENTS:
        metric = instrument.metric(family)
        if metric is None:
            out[instrument.id] = NOT_MEASURED
        else:
            out[instrument.id] = symptom(run[metric], reference[metric], instrument.floor)
    return out


def distance(a: Mapping[str, str], b: Mapping[str, str]) -> int:
    """On how many instruments the signs ``a`` and ``b`` (of :func:`symptoms`) differ."""
    return sum(a[key] != b[key] for key in a)
