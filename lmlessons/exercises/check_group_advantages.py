"""Checker for ``group_advantages`` (lesson 12), in the runner's pattern
(:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The reference is :func:`lmlessons.exercises.solutions_part3.group_advantages`: GRPO's advantages as
TRL 1.16's ``GRPOTrainer._generate_and_score_completions`` computes them with one reward function
(``trainer/grpo_trainer.py:2761-2788``; ``tests/test_exercises.py`` holds the reference against
those lines with TRL's own ``nanstd`` on every case, ``tests/test_grpo_trl.py`` the core's function
against the trainer). Cases, in order (the first failure is reported): 1-3. the lesson's two groups
of four under the default ``scale_rewards``, ``"batch"`` and ``"none"``; 4. groups of 2, one
whose rewards are equal (0, not NaN); 5. 0/1 rewards, four groups of four (as many groups as
completions per group: a mean taken without ``keepdim`` broadcasts silently), two of them without
spread; 6. a group whose rewards barely differ (the ``+ 1e-4`` changes its advantages by a tenth);
7. ``"batch"`` on equal rewards (0, not NaN); 8. float64 rewards (the result keeps their dtype);
9. one prompt (``B = num_generations``); 10. three prompts under ``"none"``; then 16 seeded
batches (:func:`_generated`): groups of 2 to 6, one to five prompts, the three scalings in turn,
Gaussian, integer-valued, 0/1 and offset rewards, every fifth batch float64.

A wrong result is compared with what known mistakes give on the same case (:func:`_candidates`),
computed in float64 from the case's rewards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Mistake, Runner, first_difference

SIGNATURE = (
    'group_advantages(rewards, *, num_generations, scale_rewards="group") -> advantages   '
    "# (B,), in the rewards' dtype"
)
SCALES = ("group", "batch", "none")
EPSILON = 1e-4  # TRL's, added to the standard deviation (grpo_trainer.py:2787)

#: A known mistake: (code, what its result is, in words, the ``(B,)`` result it gives).
Candidate = tuple[str, str, torch.Tensor]


def _case(
    label: str,
    rewards: list[float] | torch.Tensor,
    g: int,
    scale: str | None = None,
    dtype: torch.dtype = torch.float32,
    ok: str | tuple[str, ...] = "",
) -> Case:
    """``rewards`` as a ``(B,)`` tensor of ``dtype``; ``scale`` None: the default is not passed."""
    values = torch.as_tensor(rewards, dtype=dtype)  # (B,)
    kwargs: dict[str, Any] = {"num_generations": g}
    if scale is not None:
        kwargs["scale_rewards"] = scale
    shown = ", ".join(f"{v:g}" for v in values.tolist())
    kind = ", float64" if dtype == torch.float64 else ""
    text = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return Case(f"{label} (rewards [{shown}]{kind}, {text})", (values,), kwargs, ok=ok)


LESSON = [2.0, 8.0, 12.0, 16.0, 9.0, 10.0, 10.0, 11.0]  # lesson 12's two groups of four


_ZERO_ONE = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]

# Cases 1 to 10: (rewards, num_generations, scale_rewards or None for the default, dtype, ok).
_ROWS: list[tuple[list[float], int, str | None, torch.dtype, str | tuple[str, ...]]] = [
    (
        LESSON,
        4,
        None,
        torch.float32,
        (
            "each reward minus the mean of its own group, the `num_generations` consecutive "
            "rewards of one prompt",
            '`scale_rewards` defaults to `"group"`: divided by the group\'s standard '
            "deviation (Bessel's, n - 1, as TRL's `nanstd`) + 1e-4",
        ),
    ),
    (
        LESSON,
        4,
        "batch",
        torch.float32,
        '`"batch"`: the baseline is still the group\'s mean; the spread is the standard '
        "deviation of all B rewards + 1e-4",
    ),
    (LESSON, 4, "none", torch.float32, '`"none"`: the group\'s mean subtracted, not divided'),
    (
        [1.0, 1.0, 0.0, 1.0, 3.0, 3.0],
        2,
        "group",
        torch.float32,
        "groups of 2; a group whose rewards are all equal gets 0, not NaN (0 / (0 + 1e-4))",
    ),
    (
        _ZERO_ONE,
        4,
        "group",
        torch.float32,
        "0/1 rewards, as many groups as completions per group: groups that all failed or all "
        "passed get 0",
    ),
    (
        [0.0, 0.0005, 0.001, 0.002, 1.0, 2.0, 3.0, 4.0],
        4,
        "group",
        torch.float32,
        "rewards that barely differ: the 1e-4 is added to the standard deviation, outside "
        "the square root",
    ),
    (
        [1.0] * 6,
        3,
        "batch",
        torch.float32,
        '`"batch"` when every reward of the batch is equal: 0, not NaN',
    ),
    (
        [0.25, -1.5, 3.0, 0.5, 2.0, 2.0],
        3,
        "group",
        torch.float64,
        "float64 rewards give float64 advantages (the rewards' dtype)",
    ),
    ([3.0, -1.0, 4.0, 1.0, -5.0], 5, "group", torch.float32, "one prompt (B = G)"),
    ([5.0, 1.0, 0.0, 2.0, 2.0, 8.0, 1.0, 1.0, 4.0], 3, "none", torch.float32, ""),
]


def _hand_written() -> list[Case]:
    """Cases 1 to 10 (see the module's docstring)."""
    return [
        _case(f"hidden case {i + 1}", r, g, scale, dtype, ok)
        for i, (r, g, scale, dtype, ok) in enumerate(_ROWS)
    ]


def _generated(n: int = 16) -> list[Case]:
    """``n`` seeded batches: G in 2..6, 1..5 prompts, the scalings in turn; rewards Gaussian,
    integer-valued (0..3), 0/1 or offset (50 + 10 x Gaussian, like lengths) in turn, the first
    group made equal in every other integer or 0/1 batch; every fifth batch float64."""
    g = gen(131)
    cases = []
    for i in range(n):
        G = int(torch.randint(2, 7, (), generator=g))
        P = int(torch.randint(1, 6, (), generator=g))
        kind = i % 4
        if kind == 0:
            rewards = torch.randn(P * G, generator=g, dtype=torch.float64)  # (B,)
        elif kind == 1:
            rewards = torch.randint(0, 4, (P * G,), generator=g).double()  # (B,)
        elif kind == 2:
            rewards = (torch.rand(P * G, generator=g) < 0.4).double()  # (B,)
        else:
            rewards = 50 + 10 * torch.randn(P * G, generator=g, dtype=torch.float64)  # (B,)
        if kind in (1, 2) and i % 8 < 4:
            rewards[:G] = rewards[0]  # a group without spread
        dtype = torch.float64 if i % 5 == 4 else torch.float32
        rounded = rewards.to(dtype)  # (B,): what the case passes
        cases.append(_case(f"generated case {i + 1}", rounded, G, SCALES[i % 3], dtype))
    ok = (
        f"equal to TRL's advantages on {n} random batches (groups of 2 to 6, one to five "
        "prompts, 0/1 and integer rewards, groups without spread, float64)"
    )
    cases[-1] = replace(cases[-1], ok=ok)
    return cases


def cases() -> list[Case]:
    """Every case the checker runs, in order: the hand-written ones, then the generated ones."""
    return _hand_written() + _generated()


# --------------------------------------------------------------------------- known mistakes


@dataclass(frozen=True)
class Stats:
    """What the candidates of one case are made of, in float64."""

    rewards: torch.Tensor  # (B,)
    g: int

    @property
    def grouped(self) -> torch.Tensor:
        return self.rewards.view(-1, self.g)  # (P, G): the right groups

    def per_row(self, values: torch.Tensor) -> torch.Tensor:
        """``(P, 1)`` group statistics repeated over each group's G rewards, ``(B,)``."""
        return values.expand(-1, self.g).reshape(-1)  # (B,)

    @property
    def advantages(self) -> torch.Tensor:
        return self.rewards - self.per_row(self.grouped.mean(1, keepdim=True))  # (B,)

    def group_std(self, correction: int = 1) -> torch.Tensor:
        return self.per_row(self.grouped.std(1, keepdim=True, correction=correction))  # (B,)

    def result(self, scale: str) -> torch.Tensor:
        """The right result, in float64."""
        if scale == "group":
            return self.advantages / (self.group_std() + EPSILON)
        if scale == "batch":
            return self.advantages / (self.rewards.std() + EPSILON)
        return self.advantages


def _groupings(s: Stats) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Other ways to form the groups: (which rewards form a group, in words; each reward's group
    mean; its group std), both ``(B,)``."""
    B, G = s.rewards.numel(), s.g
    P = B // G
    by_column = s.rewards.view(P, G)  # (P, G): column j is the j-th completion of every prompt
    mean, std = by_column.mean(0, keepdim=True), by_column.std(0, keepdim=True)  # (1, G)
    out = [
        (
            "the j-th completions of every prompt (`dim=0` of `rewards.view(-1, G)`)",
            mean.expand(P, G).reshape(-1),
            std.expand(P, G).reshape(-1),
        )
    ]
    if P > 1:
        rows = s.rewards.view(G, P)  # (G, P): `view(G, -1)`
        out.append(
            (
                "runs of B / G consecutive rewards (the rows of `rewards.view(G, -1)`)",
                rows.mean(1, keepdim=True).expand(G, P).reshape(-1),
                rows.std(1, keepdim=True).expand(G, P).reshape(-1),
            )
        )
        mean0, std0 = rows.mean(0, keepdim=True), rows.std(0, keepdim=True)  # (1, P)
        out.append(
            (
                f"rewards {P} apart, interleaved (the columns of `rewards.view(G, -1)`)",
                mean0.expand(G, P).reshape(-1),
                std0.expand(G, P).reshape(-1),
            )
        )
    return out


def _grouping_candidates(s: Stats, scale: str) -> list[Candidate]:
    """The right formula on the wrong groups; and, under ``"group"``, the right mean with the
    std of the wrong groups."""
    out: list[Candidate] = []
    for groups, mean, std in _groupings(s):
        adv = s.rewards - mean  # (B,)
        what = f"grouped as {groups}"
        if scale == "group":
            out.append(("wrong_grouping", what, adv / (std + EPSILON)))
            right_mean = f"the right mean, but the std of {groups}"
            out.append(("wrong_grouping", right_mean, s.advantages / (std + EPSILON)))
        elif scale == "batch":
            out.append(("wrong_grouping", what, adv / (s.rewards.std() + EPSILON)))
        else:
            out.append(("wrong_grouping", what, adv))
    return out


def _keepdim_candidates(s: Stats, scale: str) -> list[Candidate]:
    """``grouped - grouped.mean(dim=1)`` without ``keepdim``: a ``(P,)`` mean broadcast along the
    rows, so reward j of every group loses the mean of group j (only when P == G)."""
    grouped = s.grouped  # (P, G)
    P, G = grouped.shape
    if P != G:
        return []
    adv = grouped - grouped.mean(1)  # (P, G): mean of group j subtracted from column j
    std = grouped.std(1)  # (P,) broadcast the same way
    what = "each group's `mean(dim=1)` without `keepdim=True`, broadcast along the rows"
    if scale == "group":
        return [
            ("missing_keepdim", what, (adv / (std + EPSILON)).reshape(-1)),
            ("missing_keepdim", what, (adv / (s.grouped.std(1, keepdim=True) + EPSILON)).view(-1)),
            ("missing_keepdim", what, s.advantages / (std.repeat(P) + EPSILON)),
        ]
    if scale == "batch":
        return [("missing_keepdim", what, adv.reshape(-1) / (s.rewards.std() + EPSILON))]
    return [("missing_keepdim", what, adv.reshape(-1))]


def _std_candidates(s: Stats, std: torch.Tensor, n: int, where: str) -> list[Candidate]:
    """The right advantages divided by a wrong form of ``std`` (the group's or the batch's,
    ``(B,)``, over ``n`` rewards)."""
    adv = s.advantages  # (B,)
    variance = std.square()  # (B,), Bessel's
    population = (variance * (n - 1) / n).sqrt()  # (B,)
    return [
        (
            "population_std",
            f"divided by the {where}'s population standard deviation (n, not n - 1) + 1e-4",
            adv / (population + EPSILON),
        ),
        ("no_std_epsilon", f"divided by the {where}'s standard deviation alone", adv / std),
        (
            "no_std_epsilon",
            f"divided by the {where}'s standard deviation alone, 0 where it is 0",
            torch.where(std == 0, torch.zeros_like(adv), adv / std),
        ),
        (
            "epsilon_inside_sqrt",
            f"divided by sqrt(the {where}'s variance + 1e-4)",
            adv / (variance + EPSILON).sqrt(),
        ),
        (
            "divides_by_variance",
            f"divided by the {where}'s variance + 1e-4",
            adv / (variance + EPSILON),
        ),
    ]


def _candidates(case: Case) -> list[Candidate]:
    """The ``(B,)`` results of the known mistakes on ``case``, in float64."""
    s = Stats(case.args[0].double(), int(case.kwargs["num_generations"]))
    scale = case.kwargs.get("scale_rewards", "group")
    r = s.rewards
    out = _grouping_candidates(s, scale) + _keepdim_candidates(s, scale)
    if scale == "group":
        return out + _std_candidates(s, s.group_std(), s.g, "group")
    if scale == "batch":
        centred = s.advantages  # (B,)
        return [
            *out,
            *_std_candidates(s, r.std().expand_as(r), r.numel(), "batch"),
            (
                "batch_mean_subtracted",
                "the batch's mean subtracted, not each group's",
                (r - r.mean()) / (r.std() + EPSILON),
            ),
            (
                "batch_std_of_advantages",
                "divided by the std of the advantages (rewards minus their group's mean), not of "
                "the rewards",
                centred / (centred.std() + EPSILON),
            ),
            (
                "ignores_scale_rewards",
                'divided by each group\'s std, as `"group"`',
                s.result("group"),
            ),
        ]
    return [
        *out,
        ("none_still_scales", 'divided by each group\'s std, as `"group"`', s.result("group")),
        ("none_still_scales", 'divided by the batch\'s std, as `"batch"`', s.result("batch")),
        ("none_skips_baseline", "the rewards as they are, no baseline subtracted", r),
    ]


# --------------------------------------------------------------------------- comparing


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Every entry within 1e-4 of ``want`` (relative above 1); NaN only where ``want`` is NaN."""
    g, w = got.detach().double(), want.detach().double()
    near = (g - w).abs() <= 1e-4 * w.abs().clamp(min=1.0)
    return bool((near | (g.isnan() & w.isnan())).all())


def _show(values: torch.Tensor, digits: int = 4, most: int = 12) -> str:
    shown = [f"{float(v):.{digits}f}" for v in values.detach()[:most]]
    return "[" + ", ".join(shown) + (", ..." if values.numel() > most else "") + "]"


def _both(got: torch.Tensor, expected: torch.Tensor) -> tuple[str, str]:
    """``got`` and ``expected`` shown with enough decimals (4 to 6) to tell them apart."""
    for digits in (4, 5):
        if _show(got, digits) != _show(expected, digits):
            break
    else:
        digits = 6
    return _show(got, digits), _show(expected, digits)


def _named(case: Case, got: torch.Tensor, expected: torch.Tensor) -> Mistake | None:
    """The known mistake whose result ``got`` equals (None if none does, or two codes do)."""
    found = [c for c in _candidates(case) if _close(got, c[2]) and not _close(c[2], expected)]
    if len({code for code, _, _ in found}) != 1:
        return None
    code, what, _ = found[0]
    mine, theirs = _both(got, expected)
    return Mistake(code, f"On {case.label}, your advantages are {mine}, {what}; expected {theirs}.")


def _zero_spread(case: Case) -> torch.Tensor:
    """``(B,)`` bool: the rewards whose spread (the group's, or the batch's under ``"batch"``) is
    0, where dividing without the 1e-4 gives 0 / 0."""
    s = Stats(case.args[0].double(), int(case.kwargs["num_generations"]))
    if case.kwargs.get("scale_rewards", "group") == "batch":
        return (s.rewards.std() == 0).expand_as(s.rewards)
    return s.group_std() == 0


def _diagnose(case: Case, got: torch.Tensor, expected: torch.Tensor) -> Mistake:
    """The mistake a wrong ``got`` shows."""
    found = _named(case, got, expected)
    if found is not None:
        return found
    bad = ~torch.isfinite(got.detach())  # (B,)
    zero = _zero_spread(case)
    if bool(bad.any()) and bool(zero.any()) and torch.equal(bad, zero):
        mine, theirs = _both(got, expected)
        return Mistake(
            "no_std_epsilon",
            f"On {case.label}, your advantages are {mine}: not a number exactly where the "
            f"spread is 0; expected {theirs}.",
        )
    where = first_difference(got, expected, atol=1e-4)
    return Mistake("wrong_value", f"On {case.label}, the advantages: {where}.")


def _as_advantages(run: Runner, case: Case, out: object, expected: torch.Tensor) -> torch.Tensor:
    """``out`` if it is a float tensor of the reference's shape and dtype; else the mistake."""
    run.compare(case, out, expected, "the advantages")
    assert isinstance(out, torch.Tensor)  # compare raised otherwise
    if out.dtype != expected.dtype:
        raise Mistake(
            "changes_dtype",
            f"On {case.label}, the advantages have dtype {out.dtype}; the rewards are "
            f"{case.args[0].dtype}.",
        )
    return out


def _explain(case: Case) -> Any:
    """``missing_keepdim`` for the error of a ``(P, G)`` minus a ``(P,)`` mean."""
    G = int(case.kwargs["num_generations"])
    P = case.args[0].numel() // G

    def explain(exc: BaseException) -> str | None:
        text = str(exc)
        sizes = f"({G})" in text and f"({P})" in text
        return "missing_keepdim" if "must match the size" in text and sizes else None

    return explain


def check_group_advantages(run: Runner) -> None:
    for case in cases():
        expected = run.expected(case)
        got = _as_advantages(run, case, run.call(case, explain=_explain(case)), expected)
        if not _close(got, expected):
            raise _diagnose(case, got, expected)
        run.passed_case(case)
