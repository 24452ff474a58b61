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

A wrong result is compared with what the known mistakes (the catalogue below: small wrong
implementations, each with its mistake code) give on the same case.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, first_difference

SIGNATURE = (
    'group_advantages(rewards, *, num_generations, scale_rewards="group") -> advantages   '
    "# (B,), in the rewards' dtype"
)
SCALES = ("group", "batch", "none")
EPSILON = 1e-4  # TRL's, added to the standard deviation (grpo_trainer.py:2787)


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
# Most are the right formula (:func:`_right`) with one part replaced; a docstring's ``{where}``
# is "group's" or "batch's", ``{P}`` the number of prompts (:func:`_named`).

known = Catalogue("group_advantages")


def _std(x: torch.Tensor, dim: int = -1, keepdim: bool = True, correction: int = 1) -> Any:
    """The standard deviation of ``x`` along ``dim`` + 1e-4 (right: Bessel's, ``keepdim``)."""
    return x.std(dim=dim, keepdim=keepdim, correction=correction) + EPSILON


def _advantages(grouped, rewards, scale, dim=1, group=None, batch=None, mean_keepdim=True):
    """The right formula on the groups that are ``grouped``'s slices along ``dim`` (right: the
    rows of ``rewards.view(-1, G)``), flattened. ``group``, ``batch``: what ``"group"`` and
    ``"batch"`` divide by, if not the right spreads; ``mean_keepdim=False``: each group's mean
    without its dimension (it broadcasts along the rows)."""
    centred = grouped - grouped.mean(dim=dim, keepdim=mean_keepdim)
    if scale == "group":
        centred = centred / (_std(grouped, dim) if group is None else group)
    elif scale == "batch":
        centred = centred / (_std(rewards) if batch is None else batch)
    return centred.reshape(-1)


def _right(rewards, g, scale, group=None, batch=None, mean_keepdim=True):
    """:func:`_advantages` on the right groups, the rows of ``rewards.view(-1, g)``."""
    return _advantages(rewards.view(-1, g), rewards, scale, 1, group, batch, mean_keepdim)


@known("population_std")
def std_without_bessel(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the {where} population standard deviation (n, not n - 1) + 1e-4."""
    grouped = rewards.view(-1, num_generations)  # (P, G)
    std = _std(grouped, correction=0), _std(rewards, correction=0)  # (P, 1), (1,)
    return _right(rewards, num_generations, scale_rewards, *std)


@known("no_std_epsilon")
def divides_by_std_alone(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the {where} standard deviation alone."""
    std = rewards.view(-1, num_generations).std(dim=1, keepdim=True)  # (P, 1)
    return _right(rewards, num_generations, scale_rewards, std, rewards.std())


@known("no_std_epsilon")
def zero_where_no_spread(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the {where} standard deviation alone, 0 where it is 0."""
    grouped = rewards.view(-1, num_generations)  # (P, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (P, G)
    if scale_rewards == "none":
        return centred.reshape(-1)
    std = (grouped if scale_rewards == "group" else rewards).std(dim=-1, keepdim=True)
    return torch.where(std == 0, torch.zeros_like(centred), centred / std).reshape(-1)


@known("epsilon_inside_sqrt")
def epsilon_in_the_variance(rewards, *, num_generations, scale_rewards="group"):
    """Divided by sqrt(the {where} variance + 1e-4), as in layer norm."""
    var = rewards.view(-1, num_generations).var(dim=1, keepdim=True)  # (P, 1)
    std = torch.sqrt(var + 1e-4), torch.sqrt(rewards.var() + 1e-4)
    return _right(rewards, num_generations, scale_rewards, *std)


@known("divides_by_variance")
def var_for_std(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the {where} variance + 1e-4, not the standard deviation."""
    var = rewards.view(-1, num_generations).var(dim=1, keepdim=True)  # (P, 1)
    return _right(rewards, num_generations, scale_rewards, var + 1e-4, rewards.var() + 1e-4)


@known("wrong_grouping")
def statistics_over_dim_0(rewards, *, num_generations, scale_rewards="group"):
    """Grouped as the j-th completions of every prompt (`dim=0` of `rewards.view(-1, G)`)."""
    return _advantages(rewards.view(-1, num_generations), rewards, scale_rewards, 0)


@known("wrong_grouping")
def generations_as_rows(rewards, *, num_generations, scale_rewards="group"):
    """Grouped as rewards {P} apart, interleaved (the columns of `rewards.view(G, -1)`)."""
    return _advantages(rewards.view(num_generations, -1), rewards, scale_rewards, 0)


@known("wrong_grouping")
def runs_of_prompts(rewards, *, num_generations, scale_rewards="group"):
    """Grouped as runs of B / G consecutive rewards (the rows of `rewards.view(G, -1)`)."""
    return _advantages(rewards.view(num_generations, -1), rewards, scale_rewards)


@known("wrong_grouping")
def std_over_the_other_axis(rewards, *, num_generations, scale_rewards="group"):
    """The right mean, but the std of the j-th completions of every prompt (`dim=0` of
    `rewards.view(-1, G)`)."""
    std = _std(rewards.view(-1, num_generations), 0)  # (1, G)
    return _right(rewards, num_generations, scale_rewards, std)


@known("missing_keepdim")
def mean_without_keepdim(rewards, *, num_generations, scale_rewards="group"):
    """Each group's `mean(dim=1)` without `keepdim=True`, broadcast along the rows."""
    std = _std(rewards.view(-1, num_generations), 1, keepdim=False)  # (P,)
    return _right(rewards, num_generations, scale_rewards, std, mean_keepdim=False)


@known("missing_keepdim")
def mean_without_keepdim_std_with(rewards, *, num_generations, scale_rewards="group"):
    """Each group's `mean(dim=1)` without `keepdim=True` (the std with it), broadcast along
    the rows."""
    return _right(rewards, num_generations, scale_rewards, mean_keepdim=False)


@known("missing_keepdim")
def std_without_keepdim(rewards, *, num_generations, scale_rewards="group"):
    """Each group's `std(dim=1)` without `keepdim=True`, broadcast along the rows."""
    std = _std(rewards.view(-1, num_generations), 1, keepdim=False)  # (P,)
    return _right(rewards, num_generations, scale_rewards, std)


@known("batch_mean_subtracted")
def batch_normalises_the_batch(rewards, *, num_generations, scale_rewards="group"):
    """The batch's mean subtracted, not each group's."""
    if scale_rewards == "batch":
        return (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    return _right(rewards, num_generations, scale_rewards)


@known("batch_std_of_advantages")
def batch_std_after_centring(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the std of the advantages (rewards minus their group's mean), not of the
    rewards."""
    std = _right(rewards, num_generations, "none").std() + 1e-4
    return _right(rewards, num_generations, scale_rewards, batch=std)


@known("ignores_scale_rewards")
def batch_as_group(rewards, *, num_generations, scale_rewards="group"):
    """Divided by each group's std, as `"group"`."""
    std = _std(rewards.view(-1, num_generations))  # (P, 1)
    return _right(rewards, num_generations, scale_rewards, batch=std)


@known("none_still_scales")
def none_falls_through_to_group(rewards, *, num_generations, scale_rewards="group"):
    """Divided by each group's std, as `"group"`."""
    return _right(rewards, num_generations, "group" if scale_rewards == "none" else scale_rewards)


@known("none_still_scales")
def none_as_batch(rewards, *, num_generations, scale_rewards="group"):
    """Divided by the batch's std, as `"batch"`."""
    return _right(rewards, num_generations, "batch" if scale_rewards == "none" else scale_rewards)


@known("none_skips_baseline")
def none_returns_the_rewards(rewards, *, num_generations, scale_rewards="group"):
    """The rewards as they are, no baseline subtracted."""
    if scale_rewards == "none":
        return rewards.clone()
    return _right(rewards, num_generations, scale_rewards)


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
    B, G = case.args[0].numel(), int(case.kwargs["num_generations"])
    where = "batch's" if case.kwargs.get("scale_rewards") == "batch" else "group's"
    found = known.which(case, got, expected, _close, where=where, P=B // G)
    if found is None:
        return None
    mine, theirs = _both(got, expected)
    return Mistake(
        found[0], f"On {case.label}, your advantages are {mine}, {found[1]}; expected {theirs}."
    )


def _zero_spread(case: Case) -> torch.Tensor:
    """``(B,)`` bool: the rewards whose spread (the group's, or the batch's under ``"batch"``) is
    0, where dividing without the 1e-4 gives 0 / 0."""
    rewards = case.args[0].double()  # (B,)
    if case.kwargs.get("scale_rewards", "group") == "batch":
        return (rewards.std() == 0).expand_as(rewards)
    grouped = rewards.view(-1, int(case.kwargs["num_generations"]))  # (P, G)
    return (grouped.std(dim=1, keepdim=True) == 0).expand_as(grouped).reshape(-1)


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
