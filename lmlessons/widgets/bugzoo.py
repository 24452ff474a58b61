"""Lesson 08 (bug zoo): the diagnosis widget, the case plots, and the reveal of each bug.

:func:`bug_zoo_widget` shows one case of one group (:data:`~lmlessons.bugzoo.cases.GROUPS`:
the cases of Part I, those after lessons 09 and 10, 11 and 12, 14 and 15) at a time
(the ``case`` dropdown): its setting, its loss
curve beside the healthy run's, a table of symptoms (this run against the healthy run) and its
samples or fill-in guesses, all from the recorded runs. The ``diagnosis`` dropdown takes the
learner's answer for that case and shows feedback that points at the evidence
(:func:`lmlessons.exercises.check_bugzoo.feedback`); each case keeps its answer. The hidden
state reads e.g. ``case=A diagnosis=no_bug verdict=wrong answered=1 right=0``.

:func:`plot_all_cases` draws every case of a group against its healthy run,
:func:`all_symptoms_html` and :func:`all_examples_html` tabulate them (what the lesson shows
without a kernel);
:func:`reveal` shows a case's bug beside its fix (the source of the two functions that really
ran), or the setting that differs for a case without a bug in its code.
"""

from __future__ import annotations

import html
import inspect
import math
from collections.abc import Mapping
from typing import Any

import ipywidgets as widgets
from IPython.display import HTML
from matplotlib.figure import Figure
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from lmlessons.bugzoo.cases import (
    CASES,
    DIAGNOSES,
    GROUPS,
    Case,
    case_summaries,
    differing_settings,
    get_case,
    group_cases,
    offered_diagnoses,
)
from lmlessons.bugzoo.instruments import INSTRUMENTS, NOT_MEASURED, Instrument, symptom
from lmlessons.bugzoo.records import load_records
from lmlessons.course.palette import BAD, CODE_BOX, CODE_STYLE, GOOD, INK, MUTED, ink_on
from lmlessons.course.training import smoothed
from lmlessons.exercises.check_bugzoo import feedback
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    TABLE_OPEN,
    OutputRecord,
    figure_png,
    html_output,
    new_figure,
    png_output,
    state_output,
)

__all__ = [
    "plot_case",
    "plot_all_cases",
    "symptom_table_html",
    "all_symptoms_html",
    "examples_html",
    "all_examples_html",
    "diagnoses_html",
    "reveal_html",
    "reveal",
    "bug_zoo_marker",
    "BugZooWidget",
    "bug_zoo_widget",
]

Records = Mapping[str, dict[str, Any]]
Summary = Mapping[str, float]

_RATES = ("accuracy", "rate", "error", "prefers")  # shown in %
_COUNTS = ("targets", "step", "tokens")
CASE_COLOR, HEALTHY_COLOR = "#d7191c", "#4d4d4d"


def _records(records: Records | None) -> Records:
    return load_records() if records is None else records


def _format(metric: str, value: float | None) -> str:
    """A symptom as the tables show it: rates in %, counts whole, losses to 2 decimals."""
    if value is None:
        return "—"
    if math.isnan(value):
        return "NaN"
    if metric.endswith(("_error", "_change")):
        return f"{value:.2%}"
    if any(word in metric for word in _RATES):
        return f"{value:.1%}"
    if any(word in metric for word in _COUNTS):
        return f"{value:.0f}"
    return f"{value:.2f}"


def _versus(case: Case) -> str:
    """The title of a case's figure, and its text form."""
    return f"case {case.id} against its healthy run"


def _curve(ax: Any, values: list[float], color: str, label: str) -> None:
    steps = range(1, len(values) + 1)
    ax.plot(steps, values, color=color, alpha=0.25, lw=1)
    ax.plot(steps, smoothed(values), color=color, lw=1.8, label=label)


def plot_case(
    ax: Any, case: Case | str, records: Records | None = None, *, key: str = "loss"
) -> Any:
    """The case's ``key`` per step (``"loss"``, ``"grad_norm"``, ``"nsp_accuracy"``) beside its
    healthy run's: faint raw values, bold smoothed ones; a dotted line at the first NaN."""
    case = get_case(case) if isinstance(case, str) else case
    records = _records(records)
    mine, healthy = records[case.run]["history"][key], records[case.reference]["history"][key]
    _curve(ax, healthy, HEALTHY_COLOR, "healthy run")
    _curve(ax, mine, CASE_COLOR, f"case {case.id}")
    nan_steps = [i + 1 for i, v in enumerate(mine) if math.isnan(v)]
    if nan_steps:
        ax.axvline(
            nan_steps[0], color=CASE_COLOR, ls=":", lw=1.2, label=f"NaN from step {nan_steps[0]}"
        )
    ax.set_xlabel("optimizer step")
    ax.grid(alpha=0.3)
    return ax


_SECOND_KEYS = {
    "pretraining": "nsp_accuracy",
    "dpo": "reward_accuracy",
    "moe": "aux_loss",
    "mtp": "loss_depth_2",
}


def _second_key(case: Case, records: Records) -> str:
    return _SECOND_KEYS.get(records[case.run]["family"], "grad_norm")


_YLABELS = {
    "loss": "train loss",
    "grad_norm": "gradient norm",
    "nsp_accuracy": "train NSP accuracy",
    "reward_accuracy": "train reward accuracy",
    "aux_loss": "train aux loss",
    "loss_depth_2": "train loss of depth 2",
}


def _case_figure(case: Case, records: Records) -> Figure:
    fig = new_figure(7.6, 2.6)
    for i, key in enumerate(("loss", _second_key(case, records))):
        ax = fig.add_subplot(1, 2, i + 1)
        plot_case(ax, case, records, key=key)
        ax.set_ylabel(_YLABELS[key])
        if key == "grad_norm":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle(_versus(case), fontsize=10)
    return fig


PANELS_PER_ROW = 5


def _cases(group: str | None) -> tuple[Case, ...]:
    """The cases of ``group`` (None: every case)."""
    return CASES if group is None else group_cases(group)


def plot_all_cases(records: Records | None = None, *, group: str | None = None) -> Figure:
    """Every case's train loss against its healthy run's (of ``group``; None: every case), one
    panel per case, 5 to a row."""
    records, cases = _records(records), _cases(group)
    columns = min(PANELS_PER_ROW, len(cases))
    rows = math.ceil(len(cases) / columns)
    fig = new_figure(1.92 * columns, 2.2 * rows + 0.4)
    for i, case in enumerate(cases):
        ax = fig.add_subplot(rows, columns, i + 1)
        plot_case(ax, case, records)
        ax.set_title(f"case {case.id}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("")
        if i == 0:
            ax.legend(fontsize=6)
    fig.supxlabel("optimizer step", fontsize=9)
    fig.supylabel("train loss", fontsize=9)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------

_TD = 'style="padding:2px 8px;border:1px solid #bbb;text-align:{align}"'


def _row(cells: list[str], head: bool = False, align: str = "right") -> str:
    tag = "th" if head else "td"
    out = [
        f"<{tag} {_TD.format(align='left' if i == 0 else align)}>{c}</{tag}>"
        for i, c in enumerate(cells)
    ]
    return "<tr>" + "".join(out) + "</tr>"


def _cell(instrument: Instrument, family: str, mine: Summary, healthy: Summary) -> tuple[str, ...]:
    """``(sign, case value, healthy value)`` of one instrument (all "—" if not measured)."""
    metric = instrument.metric(family)
    if metric is None:
        return NOT_MEASURED, NOT_MEASURED, NOT_MEASURED
    values = tuple(_format(metric, s[metric]) for s in (mine, healthy))
    if math.isnan(mine[metric]) and mine["first_nan_step"] and metric == "final_train_loss":
        values = (f"NaN from step {mine['first_nan_step']:.0f}", values[1])
    return (symptom(mine[metric], healthy[metric], instrument.floor), *values)


def symptom_table_html(case: Case | str, records: Records | None = None) -> str:
    """Every instrument measured for the case's model family: the case's value, the healthy
    run's, and the sign (:func:`~lmlessons.bugzoo.instruments.symptom`)."""
    case = get_case(case) if isinstance(case, str) else case
    mine, healthy = case_summaries(case, _records(records))
    rows = [_row(["instrument", f"case {case.id}", "healthy run", "sign"], head=True)]
    for instrument in INSTRUMENTS:
        if instrument.metric(case.family) is not None:
            sign, a, b = _cell(instrument, case.family, mine, healthy)
            rows.append(_row([html.escape(instrument.label), a, b, sign]))
    return TABLE_OPEN + "".join(rows) + "</table>"


def all_symptoms_html(records: Records | None = None, *, group: str | None = None) -> str:
    """One table for every case (of ``group``; None: every case): a row per case, a column per
    instrument measured for one of them; each cell the sign, the case's value and, below it in
    grey, the healthy run's (what reads without a kernel)."""
    records, cases = _records(records), _cases(group)
    measured = [i for i in INSTRUMENTS if any(i.metric(c.family) for c in cases)]
    head = ["case", *(html.escape(i.label) for i in measured)]
    rows = [_row(head, head=True)]
    for case in cases:
        mine, healthy = case_summaries(case, records)
        cells = [f"<b>{case.id}</b> {html.escape(case.family)}"]
        for instrument in measured:
            sign, a, b = _cell(instrument, case.family, mine, healthy)
            shown = a if sign == "NaN" else f"<b>{sign}</b> {a}"  # no "NaN NaN"
            grey = f'<br><span style="{MUTED}">{b}</span>'
            cells.append(sign if sign == NOT_MEASURED else shown + grey)
        rows.append(_row(cells))
    return TABLE_OPEN.replace("font-size:12px", "font-size:11px") + "".join(rows) + "</table>"


def _examples(record: dict[str, Any]) -> list[str]:
    if "guesses" in record:
        return [f"{prompt} → {guess}" for prompt, guess in record["guesses"].items()]
    return list(record.get("samples", []))


def examples_html(case: Case | str, records: Records | None = None) -> str:
    """The case's fill-in guesses (MLM) or greedy samples (causal LM) beside the healthy run's;
    empty for pretraining."""
    case = get_case(case) if isinstance(case, str) else case
    records = _records(records)
    mine, healthy = records[case.run], records[case.reference]
    if "guesses" in mine:
        rows = [_row(["fill in [MASK]", f"case {case.id}", "healthy run"], head=True, align="left")]
        for prompt, guess in mine["guesses"].items():
            cells = [prompt, guess, healthy["guesses"][prompt]]
            rows.append(_row([html.escape(c) for c in cells], align="left"))
        return TABLE_OPEN + "".join(rows) + "</table>"
    if "samples" in mine:
        rows = [_row(["greedy samples", f"case {case.id}", "healthy run"], head=True, align="left")]
        for i, (a, b) in enumerate(zip(mine["samples"], healthy["samples"], strict=True)):
            rows.append(_row([str(i + 1), html.escape(a), html.escape(b)], align="left"))
        return TABLE_OPEN.replace("margin", "max-width:900px;margin") + "".join(rows) + "</table>"
    return ""


def all_examples_html(records: Records | None = None, *, group: str | None = None) -> str:
    """Every case's (of ``group``; None: every case) fill-in guesses or greedy samples beside its
    healthy run's, a row per case ("—" where the family has none)."""
    records = _records(records)
    head = ["case", "guesses or samples of the case", "of its healthy run"]
    rows = [_row(head, head=True, align="left")]
    for case in _cases(group):
        pair = [_examples(records[case.run]), _examples(records[case.reference])]
        cells = ["<br>".join(html.escape(x) for x in ex) or NOT_MEASURED for ex in pair]
        rows.append(_row([f"<b>{case.id}</b> {html.escape(case.family)}", *cells], align="left"))
    return TABLE_OPEN.replace("margin", "max-width:980px;margin") + "".join(rows) + "</table>"


def diagnoses_html(group: str | None = None) -> str:
    """The diagnoses to choose from in ``group`` (None: all): id (for ``check``) and what it
    means."""
    rows = [_row(["diagnosis id", "what is wrong"], head=True, align="left")]
    for d in offered_diagnoses(group):
        rows.append(_row([f"<code>{d.id}</code>", html.escape(d.label)], align="left"))
    return TABLE_OPEN + "".join(rows) + "</table>"


# --------------------------------------------------------------------------------------------
# Reveal
# --------------------------------------------------------------------------------------------


def _code_html(source: str, marker: str) -> str:
    lines = [i + 1 for i, line in enumerate(source.splitlines()) if f"# {marker}" in line]
    formatter = HtmlFormatter(noclasses=True, nowrap=True, hl_lines=lines, style=CODE_STYLE)
    code = highlight(source, PythonLexer(), formatter)
    return (
        '<pre style="margin:0;font-size:11.5px;line-height:1.35;background:transparent;'
        f'white-space:pre">{code}</pre>'
    )


def _differences(case: Case) -> list[str]:
    """The settings of the case's run that differ from its healthy run's, as
    ``name: a (healthy run: b)``."""
    out = []
    for name, values in differing_settings(case).items():
        a, b = (getattr(v, "__name__", repr(v)) for v in values)
        out.append(f"{name}: {a} (healthy run: {b})")
    return out


def reveal_html(case: Case | str) -> str:
    """The case's bug beside its fix (the source of the two functions the runs used, the lines
    that differ highlighted) or, when the runs' code is the same, the settings that differ;
    then why, and the lesson that teaches it."""
    case = get_case(case) if isinstance(case, str) else case
    if case.bug is not None and case.fix is not None:
        cell = f"vertical-align:top;padding:4px 8px;border:1px solid #bbb;{ink_on(CODE_BOX)}"
        columns = "".join(
            f'<td style="{cell}">'
            f'<div style="font-weight:bold;color:{color}">{name}</div>{_code_html(src, mark)}</td>'
            for name, color, src, mark in (
                ("bug", BAD, inspect.getsource(case.bug), "BUG"),
                ("fix", GOOD, inspect.getsource(case.fix), "FIX"),
            )
        )
        body = f'<table style="border-collapse:collapse;margin:4px 0"><tr>{columns}</tr></table>'
    else:
        items = "".join(f"<li><code>{html.escape(d)}</code></li>" for d in _differences(case))
        body = f'<div style="margin:4px 0">The two runs differ only in:<ul>{items}</ul></div>'
    lesson = f"; lesson {case.lesson}" if case.lesson else ""
    return (
        f'<div style="font-size:13px"><b>Case {case.id}: {html.escape(case.title)}</b> '
        f"(diagnosis <code>{case.diagnosis}</code>{lesson}){body}"
        f'<div style="max-width:900px">{html.escape(case.why)}</div></div>'
    )


def reveal(case: Case | str) -> HTML:
    """:func:`reveal_html` as a displayable object (lesson 08's reveal cells)."""
    return HTML(reveal_html(case))


# --------------------------------------------------------------------------------------------
# The widget
# --------------------------------------------------------------------------------------------


def bug_zoo_marker(case: str, diagnosis: str, verdict: str, answered: int, right: int) -> str:
    """The widget's deterministic state line (what a browser test waits for)."""
    return (
        f"case={case} diagnosis={diagnosis or 'none'} verdict={verdict} "
        f"answered={answered} right={right}"
    )


def _feedback_html(right: bool | None, text: str) -> str:
    if right is None:
        return f'<div style="{MUTED}margin:4px 0">Choose a diagnosis for this case.</div>'
    color, background = ("#1a9641", "#eef8ee") if right else ("#d7191c", "#fdf0f0")
    return (
        f'<div style="border-left:4px solid {color};background:{background};color:{INK};'
        "padding:4px 8px;"
        f'margin:4px 0;max-width:900px;font-size:13px">{html.escape(text)}</div>'
    )


class BugZooWidget(LessonWidget):
    """:func:`bug_zoo_widget`'s box; ``answers`` holds the diagnosis chosen for each case."""

    answers: dict[str, str]

    def verdicts(self) -> dict[str, bool]:
        """Whether each answered case is diagnosed right."""
        return {c: DIAGNOSES[d].id == get_case(c).diagnosis for c, d in self.answers.items()}


#: Each group's labels on its controls: one lesson shows the four widgets, and a label names
#: one control on the page (for a screen reader and for the browser test).
_LABEL_SUFFIX = {"part1": "", "part2": " (09-10)", "part3": " (11-12)", "part4": " (14-15)"}


def _controls(case: str, group: str) -> dict[str, widgets.ValueWidget]:
    layout = {"style": {"description_width": "initial"}}
    suffix = _LABEL_SUFFIX[group]
    return {
        "case": widgets.Dropdown(
            options=[(f"case {c.id}", c.id) for c in group_cases(group)],
            value=case,
            description=f"case{suffix}",
            **layout,
        ),
        "diagnosis": widgets.Dropdown(
            options=[
                ("(choose a diagnosis)", ""),
                *((d.label, d.id) for d in offered_diagnoses(group)),
            ],
            value="",
            description=f"diagnosis{suffix}",
            layout=widgets.Layout(width="720px"),
            **layout,
        ),
    }


def _case_outputs(case: Case, records: Records, png: bytes) -> list[OutputRecord]:
    """The case's setting, its curves, its symptom table and its samples or guesses."""
    setting = (
        f'<div style="font-size:13px;margin:4px 0"><b>Case {case.id}.</b> '
        f"{html.escape(case.setting)}</div>"
    )
    return [
        html_output(setting, plain=f"case {case.id}"),
        png_output(png, _versus(case)),
        html_output(symptom_table_html(case, records) + examples_html(case, records)),
    ]


def bug_zoo_widget(
    records: Records | None = None, *, group: str = "part1", case: str | None = None
) -> BugZooWidget:
    """Diagnose the cases of ``group`` (one of :data:`~lmlessons.bugzoo.cases.GROUPS`) one at a
    time (see the module docstring). ``records``: the recorded runs (default: the shipped ones);
    ``case``: the case shown first (default: the group's first). The answers so far are in
    ``.answers`` (``{case letter: diagnosis id}``, what ``check("bug_zoo", ...)`` takes)."""
    records, cases = _records(records), group_cases(group)
    case = cases[0].id if case is None else get_case(case).id
    if case not in {c.id for c in cases}:
        raise ValueError(f"case {case!r} is not in group {group!r} ({GROUPS[group]})")
    controls = _controls(case, group)
    case_box, diagnosis_box = controls["case"], controls["diagnosis"]
    answers: dict[str, str] = {}
    pictures: dict[str, bytes] = {}  # each case's figure, drawn once

    def on_case(change: dict[str, Any]) -> None:  # runs before the redraw
        diagnosis_box.value = answers.get(change["new"], "")

    def on_diagnosis(change: dict[str, Any]) -> None:  # runs before the redraw
        if change["new"]:
            answers[case_box.value] = change["new"]
        else:
            answers.pop(case_box.value, None)

    case_box.observe(on_case, names="value")
    diagnosis_box.observe(on_diagnosis, names="value")

    def draw() -> list[OutputRecord]:
        shown = get_case(case_box.value)
        if shown.id not in pictures:
            pictures[shown.id] = figure_png(_case_figure(shown, records))
        chosen = diagnosis_box.value
        right, text = feedback(shown.id, chosen, records) if chosen else (None, "")
        n_right = sum(d == get_case(c).diagnosis for c, d in answers.items())
        progress = f"{len(answers)} of {len(cases)} cases answered, {n_right} right."
        verdict = "none" if right is None else ("right" if right else "wrong")
        marker = bug_zoo_marker(shown.id, chosen, verdict, len(answers), n_right)
        note = f'<div style="{MUTED}font-size:12px">{progress}</div>'
        return [
            *_case_outputs(shown, records, pictures[shown.id]),
            html_output(_feedback_html(right, text) + note, plain=text or progress),
            state_output(marker),
        ]

    box = BugZooWidget(controls, draw)
    box.answers = answers
    return box
