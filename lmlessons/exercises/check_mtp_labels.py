"""Checker for ``mtp_labels`` (lesson 15), in the runner's pattern
(:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The reference is :func:`lmlessons.exercises.solutions_part4.mtp_labels` (the core's
:func:`lmlessons.mtp.mtp_labels`). Cases, in order (the first failure is reported): 1-4. rows
with a prompt of -100, targets of id 0 and padding, depths 2, 1 and 3 (three rows: each shifted on
its own), ``ignore_index=-1``; 5-7. depth T - 1 (one target per row), T and T + 2 (no target,
the labels' shape); 8. one token; then 12 seeded batches (:func:`_generated`). A wrong result is
compared with what the known mistakes (the catalogue below) give on the same case.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, first_difference, same

SIGNATURE = (
    "mtp_labels(labels, depth, ignore_index=-100) -> labels   # (B, T): out[:, t] = "
    "labels[:, t + depth], ignore_index in each row's last depth positions"
)
N = IGNORE_INDEX
ROWS = [[N, N, 5, 0, 7, 2, N, N], [N, 3, 3, 1, 0, 6, 4, 2], [N, N, N, 9, 8, N, N, N]]  # (3, 8)


def _case(label: str, labels: list[list[int]], depth: int, ok: Any = "", **kwargs: Any) -> Case:
    extra = "".join(f", {k}={v}" for k, v in kwargs.items())
    text = f"{label} (labels {labels}, depth={depth}{extra})"
    return Case(text, (torch.tensor(labels), depth), kwargs, ok=ok)


def _hand_written() -> list[Case]:
    """Cases 1 to 8 (see the module's docstring)."""
    minus_one = [[-1 if x == N else x for x in row] for row in ROWS[:2]]
    return [
        _case(
            "hidden case 1",
            ROWS[:2],
            2,
            (
                "position t gets the label `depth` places ahead, `labels[:, t + depth]`; -100 "
                "and id 0 are carried as they are",
                "each row's last `depth` positions get `ignore_index` (no wrap-around, no 0)",
            ),
        ),
        _case("hidden case 2", ROWS[:2], 1, "depth 1 is the next-token shift (`shift_labels`)"),
        _case(
            "hidden case 3",
            ROWS,
            3,
            "each row is shifted on its own: no target crosses into the previous row",
        ),
        _case(
            "hidden case 4",
            minus_one,
            2,
            "`ignore_index` fills the end (-1 here, not always -100)",
            ignore_index=-1,
        ),
        _case("hidden case 5", ROWS[1:], 7, "depth T - 1: one target per row, at position 0"),
        _case(
            "hidden case 6",
            ROWS[:2],
            8,
            "depth >= T leaves no target: every entry `ignore_index`, the labels' shape",
        ),
        _case("hidden case 7", ROWS[1:], 10),
        _case("hidden case 8", [[4]], 1, "one token: no target"),
    ]


def _generated(n: int = 12) -> list[Case]:
    """``n`` seeded batches: B in 1..4, T in 1..10, depth in 1..T + 1, a prompt of -100 and
    right padding per row, a fifth of the ids 0; every third ``ignore_index=-1``."""
    g = gen(151)
    cases = []
    for i in range(n):
        B, T = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(1, 11, (), generator=g))
        depth = int(torch.randint(1, T + 2, (), generator=g))
        labels = torch.randint(1, 12, (B, T), generator=g)  # (B, T)
        labels[torch.rand(B, T, generator=g) < 0.2] = 0
        fill = -1 if i % 3 == 2 else N
        for b in range(B):
            start = int(torch.randint(0, T + 1, (), generator=g))
            end = int(torch.randint(start, T + 1, (), generator=g))
            labels[b, :start] = fill
            labels[b, end:] = fill
        kwargs = {"ignore_index": -1} if fill == -1 else {}
        cases.append(_case(f"generated case {i + 1}", labels.tolist(), depth, **kwargs))
    ok = f"equal to the core's `mtp_labels` on {n} random batches (depths past the end, one row)"
    cases[-1] = replace(cases[-1], ok=ok)
    return cases


def cases() -> list[Case]:
    """Every case the checker runs, in order."""
    return _hand_written() + _generated()


# --------------------------------------------------------------------------- known mistakes

known = Catalogue("mtp_labels")


def _shifted(labels, k, fill):
    """``labels`` shifted ``k`` places left in each row, ``fill`` at the end."""
    out = torch.full_like(labels, fill)
    if k < labels.shape[-1]:
        out[:, : labels.shape[-1] - k] = labels[:, k:]
    return out


@known("mtp_shift_too_short")
def shifts_depth_minus_one(labels, depth, ignore_index=IGNORE_INDEX):
    """Shifted `depth - 1` places: the labels `depth - 1` tokens ahead."""
    return _shifted(labels, depth - 1, ignore_index)


@known("mtp_shift_too_far")
def shifts_depth_plus_one(labels, depth, ignore_index=IGNORE_INDEX):
    """Shifted `depth + 1` places: the labels `depth + 1` tokens ahead."""
    return _shifted(labels, depth + 1, ignore_index)


@known("mtp_wraps_around")
def rolls(labels, depth, ignore_index=IGNORE_INDEX):
    """`torch.roll(labels, -depth, dims=-1)`: each row's first labels wrap around to its end."""
    return torch.roll(labels, -depth, dims=-1)


@known("mtp_fills_with_zero")
def fills_with_zero(labels, depth, ignore_index=IGNORE_INDEX):
    """The last `depth` positions filled with id 0."""
    return _shifted(labels, depth, 0)


@known("ignores_ignore_index")
def always_minus_100(labels, depth, ignore_index=IGNORE_INDEX):
    """The last `depth` positions filled with -100, whatever `ignore_index`."""
    return _shifted(labels, depth, IGNORE_INDEX)


@known("mtp_crosses_rows")
def shifts_the_flat_batch(labels, depth, ignore_index=IGNORE_INDEX):
    """The flattened batch shifted: a row's end gets the next row's first labels."""
    flat = labels.reshape(1, -1)  # (1, B * T)
    return _shifted(flat, depth, ignore_index).view(labels.shape)


@known("depth_past_the_end")
def pads_depth_columns(labels, depth, ignore_index=IGNORE_INDEX):
    """`labels[:, depth:]` followed by `depth` columns of `ignore_index`."""
    pad = labels.new_full((labels.shape[0], depth), ignore_index)
    return torch.cat([labels[:, depth:], pad], dim=1)


def _check_case(run: Runner, case: Case) -> None:
    """The learner's labels on ``case``: the labels' shape and dtype, then their values."""
    labels, depth = case.args
    past = depth >= labels.shape[-1]
    expected = run.expected(case)

    def explain(exc: BaseException) -> str | None:
        return "depth_past_the_end" if past else None

    got = run.call(case, explain=explain)
    if past and isinstance(got, torch.Tensor) and got.shape != expected.shape:
        fill = case.kwargs.get("ignore_index", N)
        shapes = f"{tuple(got.shape)}; expected {tuple(expected.shape)}, every entry {fill}"
        raise Mistake("depth_past_the_end", f"On {case.label}, the result has shape {shapes}.")
    run.compare(case, got, expected, "the labels")
    if same(got, expected):
        return
    found = known.which(case, got, expected, same)
    if found is not None:
        detail = f"your labels are {got.tolist()}, {found[1]}; expected {expected.tolist()}"
        raise Mistake(found[0], f"On {case.label}, {detail}.")
    where = first_difference(got, expected)
    raise Mistake("wrong_value", f"On {case.label}, the labels: {where}.")


def check_mtp_labels(run: Runner) -> None:
    for case in cases():
        _check_case(run, case)
        run.passed_case(case)
