"""The cases of the bug zoo (what a learner diagnoses) and the diagnoses to choose from.

A :class:`Case` is one run next to its healthy reference run: a run with one bug, a run with
a too-high learning rate, or a run with no bug at all. Before the diagnosis a learner sees its
``setting``, the same words for every case of its model family (:data:`SETTINGS`), and its
symptoms; its ``title``, ``bug`` and ``fix`` are the reveal. Its ``bug`` and ``fix`` are not
stated: they are the one function its run swaps for its reference run's
(:func:`differing_settings`). Its ``claims`` are the symptoms its ``evidence`` states, each a
comparison with the reference run that :func:`claim_holds` checks on the recorded data (the
tests check every one), so no feedback states something the runs did not show.

Each case belongs to a *group* (:data:`GROUPS`), by the lesson that teaches its bug: the cases
of Part I (lessons 01 to 07, or no lesson), then those after lessons 09 and 10, then those after
lessons 11 and 12, then those after lessons 14 and 15 (Part IV), so that a learner meets each
case once the lessons it needs are done.

The prose (settings, groups, diagnoses, cases: titles, evidence, claims, why) is data, in
``lmlessons/data/content/bugzoo.toml``. Case letters do not follow the
order of :data:`DIAGNOSES`: the letter gives nothing away. Two cases share a diagnosis only as
the same bug in two model families. A new case is a run in
:data:`~lmlessons.bugzoo.runs.RUNS` and a table in the content file; the widget, the tables
and the checker take it up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from lmlessons.bugzoo.data import content
from lmlessons.bugzoo.records import load_records, summary
from lmlessons.bugzoo.runs import RUNS, model_family

__all__ = [
    "Claim",
    "Diagnosis",
    "Case",
    "SETTINGS",
    "GROUPS",
    "DIAGNOSES",
    "CASES",
    "get_case",
    "group_cases",
    "offered_diagnoses",
    "differing_settings",
    "claim_holds",
    "case_summaries",
    "evidence",
]

RELATIONS = ("lower", "higher", "close", "nan", "zero", "below")

#: The groups of cases, in the order a learner meets them: ``{group id: title}``; a case whose
#: bug a lesson of :data:`_GROUP_LESSONS` teaches is in that lesson's group, every other in
#: ``"part1"``.
GROUPS: dict[str, str] = {
    "part1": "Part I (lessons 01 to 07)",
    "part2": "after lessons 09 and 10",
    "part3": "after lessons 11 and 12",
    "part4": "after lessons 14 and 15",
}
_GROUP_LESSONS = {"part2": ("09", "10"), "part3": ("11", "12"), "part4": ("14", "15")}


@dataclass(frozen=True)
class Claim:
    """``metric`` of the case's run is ``relation`` to ``against`` (default: the same metric
    of the reference run; else another metric of the case's own run), by a relative ``margin``:
    ``"higher"``: above ``against * (1 + margin)``; ``"lower"``: below ``against * (1 - margin)``;
    ``"close"``: within ``margin`` of it; ``"nan"``: NaN where ``against`` is not; ``"zero"``:
    exactly 0; ``"below"``: below ``margin`` itself (an absolute bound, e.g. float rounding)."""

    metric: str
    relation: str
    margin: float = 0.0
    against: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    """One answer a learner can give: ``label`` names the bug, ``would_show`` what it would look
    like (the feedback for a wrong answer contrasts it with what the case shows)."""

    id: str
    label: str
    would_show: str


@dataclass(frozen=True)
class Case:
    """A run (``run``) beside its healthy ``reference`` run, and its right ``diagnosis``."""

    id: str
    run: str
    reference: str
    diagnosis: str
    title: str
    evidence: str  # a template: {c[metric]} of the case, {r[metric]} of the reference
    claims: tuple[Claim, ...]
    lesson: str  # the lesson that teaches the bug ("" for none)
    why: str

    @property
    def family(self) -> str:
        """The case's model family (one of :data:`SETTINGS`)."""
        return model_family(self.run)

    @property
    def group(self) -> str:
        """The case's group (one of :data:`GROUPS`), by the lesson that teaches its bug."""
        return next((g for g, lessons in _GROUP_LESSONS.items() if self.lesson in lessons), "part1")

    @property
    def setting(self) -> str:
        """What the learner is told before the diagnosis: its model family's setting."""
        return SETTINGS[self.family]

    @property
    def bug(self) -> Callable[..., Any] | None:
        """The function of the case's run that its reference run does not use (None when the
        runs' code is the same: no bug, or another setting such as the learning rate)."""
        return _swapped_functions(self)[0]

    @property
    def fix(self) -> Callable[..., Any] | None:
        """The reference run's function in the place of :attr:`bug` (None with it)."""
        return _swapped_functions(self)[1]


def differing_settings(case: Case) -> dict[str, tuple[Any, Any]]:
    """The settings (fields of :class:`~lmlessons.bugzoo.runs.RunSpec`) in which the case's
    run differs from its reference run: ``{name: (the run's value, the reference's)}``."""
    run, reference = RUNS[case.run], RUNS[case.reference]
    pairs = {f.name: (getattr(run, f.name), getattr(reference, f.name)) for f in fields(run)}
    return {name: (a, b) for name, (a, b) in pairs.items() if a != b}


def _swapped_functions(case: Case) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """``(bug, fix)``: the one function the case's run swaps for its reference's, or
    ``(None, None)``; a ValueError if the runs differ in more than one function."""
    swapped = [(a, b) for a, b in differing_settings(case).values() if callable(a)]
    if len(swapped) > 1:
        raise ValueError(f"case {case.id}: its runs differ in {len(swapped)} functions, not one")
    return swapped[0] if swapped else (None, None)


def _paragraph(text: str) -> str:
    """A text of the content file as one paragraph (a line break there is a space)."""
    return " ".join(text.split())


def _case(case_id: str, entry: dict[str, Any]) -> Case:
    """One ``[cases.<id>]`` table of the content file as a :class:`Case`."""
    same = {key: entry[key] for key in ("run", "reference", "diagnosis", "lesson")}
    prose = {key: _paragraph(entry[key]) for key in ("title", "evidence", "why")}
    claims = tuple(Claim(**claim) for claim in entry["claims"])
    return Case(id=case_id, claims=claims, **same, **prose)


_CONTENT = content()

#: What a learner is told about a case before the diagnosis: the same for every case of a
#: model family (:func:`~lmlessons.bugzoo.runs.model_family`), so that only the symptoms
#: tell the cases apart.
SETTINGS: dict[str, str] = {
    family: _paragraph(text) for family, text in _CONTENT["settings"].items()
}


DIAGNOSES: dict[str, Diagnosis] = {
    diagnosis_id: Diagnosis(
        diagnosis_id, _paragraph(entry["label"]), _paragraph(entry["would_show"])
    )
    for diagnosis_id, entry in _CONTENT["diagnoses"].items()
}

CASES: tuple[Case, ...] = tuple(
    _case(case_id, entry) for case_id, entry in _CONTENT["cases"].items()
)


def get_case(case_id: object) -> Case:
    """The case with id ``case_id`` (``"A"``...), or a ValueError naming the ids."""
    for case in CASES:
        if case.id == case_id:
            return case
    raise ValueError(f"unknown case {case_id!r}; the cases are {', '.join(c.id for c in CASES)}")


def group_cases(group: str) -> tuple[Case, ...]:
    """The cases of ``group`` (one of :data:`GROUPS`), or a ValueError naming the groups."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; the groups are {', '.join(GROUPS)}")
    return tuple(case for case in CASES if case.group == group)


def offered_diagnoses(group: str | None = None) -> tuple[Diagnosis, ...]:
    """The diagnoses a learner chooses from in ``group``: those of its cases and of the groups
    before it (None: every diagnosis), in the order of :data:`DIAGNOSES`."""
    if group is None:
        return tuple(DIAGNOSES.values())
    group_cases(group)  # a ValueError for an unknown group
    groups = list(GROUPS)[: list(GROUPS).index(group) + 1]
    used = {case.diagnosis for case in CASES if case.group in groups}
    return tuple(d for d in DIAGNOSES.values() if d.id in used)


def claim_holds(claim: Claim, case: Mapping[str, float], reference: Mapping[str, float]) -> bool:
    """Does ``claim`` hold between the summaries of a case's run and of its reference run?"""
    if claim.relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {claim.relation!r}")
    value = case[claim.metric]
    other = case[claim.against] if claim.against else reference[claim.metric]
    if claim.relation == "nan":
        return math.isnan(value) and not math.isnan(other)
    if claim.relation == "zero":
        return value == 0
    if claim.relation == "below":
        return value < claim.margin
    if claim.relation == "close":
        return abs(value - other) <= claim.margin * abs(other)
    if claim.relation == "higher":
        return value > other + claim.margin * abs(other)
    return value < other - claim.margin * abs(other)


def case_summaries(
    case: Case, records: Mapping[str, dict[str, Any]] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`~lmlessons.bugzoo.records.summary` of the case's run and of its reference
    (from ``records``, default: the shipped ones)."""
    records = load_records() if records is None else records
    return summary(records[case.run]), summary(records[case.reference])


def evidence(case: Case, records: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The case's evidence, with the numbers of its recorded runs."""
    c, r = case_summaries(case, records)
    return case.evidence.format(c=c, r=r)
