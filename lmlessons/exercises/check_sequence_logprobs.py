"""Checker for ``sequence_logprobs`` (lesson 11), in the runner's pattern
(:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The reference is :func:`lmlessons.exercises.solutions_part3.sequence_logprobs`: TRL's
``CPOTrainer.get_batch_logps`` (whose sum is what ``DPOTrainer`` computes for the policy and the
reference), equal to the core's :func:`lmlessons.preference.sequence_logprobs` on every case.
Cases, in order (the first failure is reported): 1. three rows with a prompt of -100s, a
completion (one target of id 0) and right padding, the sum (then its gradient); 2. the same with
``average=True``; 3. rows without any target after the shift (all -100; only position 0
labelled: 0, the sum over no token) and a row whose only target is the last token; 4. a
confident model (``softmax(...).log()`` underflows to -inf in float32); 5. ``average=True`` over
completions of 1, 3 and 6 tokens; 6. a DPO batch from :func:`lmlessons.preference_batch`;
then 16 seeded batches (:data:`GENERATED`); 7. float16 logits: the result must be float32
(the logits upcast before the softmax, as the core does; ``not_upcast``); 8. ``average=True``
with a row without a target: that row has no mean (0 / 0), so NaN there (TRL's
``get_batch_logps``, the reference solution) or a ``ValueError`` (the core's
:func:`lmlessons.preference.sequence_logprobs`) passes, a number is ``average_of_no_targets``.

A wrong result is compared with what the known mistakes (the catalogue below: small wrong
implementations, each with its mistake code) give on the same case; if none matches, the logits
are changed where no target is scored, to see whether the result moves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import DRAWN, gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, first_difference
from lmlessons.exercises._loss_checks import explain_ce, shift
from lmlessons.preference import preference_batch

SIGNATURE = (
    "sequence_logprobs(logits, labels, average=False) -> logps   # (B,) float32: labels "
    "unshifted, -100 on the prompt and the padding"
)


#: The generated cases, in order: the shape ``(B, T, V)`` (DRAWN: B in 1..4, T in 2..9, V in
#: 2..11) and whether ``average=True`` is passed (then every row gets a target). The first reach
#: length 1 (nothing to score), one target, one row, a vocabulary of 2.
GENERATED: list[tuple[tuple[int, int, int] | str, bool]] = [
    ((1, 1, 2), False),
    ((1, 2, 2), True),
    ((4, 3, 3), False),
    ((2, 9, 2), True),
    *[(DRAWN, i % 2 == 1) for i in range(12)],
]
N = IGNORE_INDEX  # in the hand-written labels: no target
_labels = torch.tensor  # (B, T) labels from rows of ids


def _hand_written() -> list[Case]:
    """Cases 1 to 6 (see the module's docstring)."""
    logits = (torch.randn(3, 7, 6, generator=gen(111)) * 1.5).requires_grad_()  # (B, T, V)
    labels = _labels(
        [
            [N, N, 4, 1, 3, 2, N],  # a 2-token prompt, 4 completion tokens, padding
            [N, N, N, 2, 0, N, N],  # a target of id 0
            [N, 3, 1, 4, 2, 1, 3],  # no padding: the last token is a target
        ]
    )
    empty = _labels([[N, N, N, N, 2], [N] * 5, [3, N, N, N, N]])
    confident = torch.randn(2, 5, 6, generator=gen(113))  # (B, T, V)
    confident[:, :, 5] += 120.0  # id 5 is nearly certain: every other id's probability < 1e-52
    lengths = _labels(
        [
            [N, N, 5, N, N, N, N, N],
            [N, 1, 2, 0, N, N, N, N],
            [N, N, 3, 4, 5, 1, 2, 0],
        ]
    )
    return [
        Case(
            f"hidden case 1 (logits (3, 7, 6); labels {labels.tolist()})",
            (logits, labels),
            ok=(
                "position t scores `labels[:, t + 1]`; one log-probability per sequence, `(B,)`, "
                "the sum over its targets",
                "-100 on the prompt and the padding is ignored; a target of id 0 counts",
            ),
        ),
        Case(
            "hidden case 2 (hidden case 1 with `average=True`: 4, 2 and 6 targets)",
            (logits, labels),
            {"average": True},
            ok="`average=True`: each row's sum divided by its own number of targets",
        ),
        Case(
            "hidden case 3 (labels [[-100, -100, -100, -100, 2], [-100] * 5, "
            "[3, -100, -100, -100, -100]])",
            (torch.randn(3, 5, 4, generator=gen(112)).requires_grad_(), empty),
            ok=(
                "a sequence's only target may be its last token (scored by position T - 2)",
                "a row without any target after the shift gives 0, the sum over no token; with "
                "`average=True` it has no mean (0 / 0): NaN there, or a `ValueError`",
            ),
        ),
        Case(
            "hidden case 4 (a confident model: logits (2, 5, 6) with 120 added to id 5; the "
            "labels' probabilities are below float32's smallest number)",
            (confident.requires_grad_(), _labels([[N, 1, 5, 2, 5], [N, N, 3, 0, 4]])),
            ok="finite log-probabilities of unlikely tokens, where `softmax(...).log()` is -inf",
        ),
        Case(
            "hidden case 5 (`average=True`; completions of 1, 3 and 6 tokens in rows of 8)",
            (torch.randn(3, 8, 6, generator=gen(114)).requires_grad_(), lengths),
            {"average": True},
        ),
        _dpo_case(),
    ]


def _dpo_case() -> Case:
    """A DPO batch of two pairs from ``preference_batch``: chosen rows, then rejected rows."""
    examples = [
        {"prompt_ids": [7, 3, 9], "chosen_ids": [4, 4, 1], "rejected_ids": [2]},
        {"prompt_ids": [5], "chosen_ids": [0, 6], "rejected_ids": [8, 3, 3, 1, 2]},
    ]
    labels = preference_batch(examples, pad_token_id=10)["labels"]  # (4, 6)
    logits = torch.randn(4, labels.shape[1], 11, generator=gen(115)).requires_grad_()
    return Case(
        f"hidden case 6 (a DPO batch from `preference_batch`, chosen rows then rejected rows: "
        f"labels {labels.tolist()})",
        (logits, labels),
        ok="a DPO batch from `preference_batch`: one log-probability per chosen and rejected row",
    )


def _generated() -> list[Case]:
    """The cases of :data:`GENERATED`: each row of a batch a prompt (-100), a completion (ids,
    a fifth of them 0) and padding (-100), of drawn lengths (every row draws a shape)."""
    g = gen(116)
    cases = []
    for i, (shape, average) in enumerate(GENERATED):
        drawn = [int(torch.randint(1, 5, (), generator=g))]
        drawn += [
            int(torch.randint(2, 10, (), generator=g)),
            int(torch.randint(2, 12, (), generator=g)),
        ]
        B, T, V = drawn if isinstance(shape, str) else shape
        labels = torch.randint(V, (B, T), generator=g)  # (B, T)
        labels[torch.rand(B, T, generator=g) < 0.2] = 0
        for b in range(B):
            prompt = int(torch.randint(0, T + 1, (), generator=g))
            end = int(torch.randint(prompt, T + 1, (), generator=g))
            labels[b, :prompt] = IGNORE_INDEX
            labels[b, end:] = IGNORE_INDEX
            if average and not bool((labels[b, 1:] != IGNORE_INDEX).any()):
                labels[b, T - 1] = int(torch.randint(V, (), generator=g))  # a target to average
        logits = (torch.randn(B, T, V, generator=g) * 2.0).requires_grad_()  # (B, T, V)
        kwargs = {"average": True} if average else {}
        text = ", `average=True`" if average else ""
        label = f"generated case {i + 1} (logits {(B, T, V)}, labels {labels.tolist()}{text})"
        cases.append(Case(label, (logits, labels), kwargs))
    ok = f"equal to TRL's `get_batch_logps` on {len(cases)} random batches (length 1, rows "
    cases[-1] = replace(cases[-1], ok=ok + "without targets, targets of id 0)")
    return cases


def half_case() -> Case:
    """Hidden case 7: float16 logits (a model run in half precision). The result is float32: the
    logits are upcast before the softmax, as the course's ``sequence_logprobs`` does."""
    logits = (torch.randn(3, 9, 7, generator=gen(117)) * 2.0).half().requires_grad_()  # (B, T, V)
    labels = _labels(
        [
            [N, N, N, 4, 1, 3, 2, 6, 5],
            [N, 2, 0, 5, 5, 1, N, N, N],
            [N, N, 6, 3, 3, 0, 1, 2, N],
        ]
    )
    return Case(
        f"hidden case 7 (float16 logits (3, 9, 7); labels {labels.tolist()})", (logits, labels)
    )


def empty_average_case() -> Case:
    """Hidden case 8: ``average=True`` with a row without any target: that row has no mean, NaN or a
    ``ValueError`` (see :func:`_check_empty_average`)."""
    logits = torch.randn(3, 6, 5, generator=gen(118)).requires_grad_()  # (B, T, V)
    labels = _labels([[N, N, 2, 3, N, N], [N] * 6, [N, 1, 0, 4, 2, N]])
    return Case(
        f"hidden case 8 (`average=True`; labels {labels.tolist()}: row 1 has no target)",
        (logits, labels),
        {"average": True},
    )


def _value_error_allowed(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn``'s result, or the ``ValueError`` it raised (allowed where a row has no mean)."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        return exc


def _check_half(run: Runner, case: Case) -> None:
    """``not_upcast`` unless float16 logits give float32 (or float64) log-probabilities equal
    to the reference's."""
    expected = run.expected(case).detach()  # (B,) float32
    got = _as_logps(run, case, run.call(case, explain=explain_ce), expected)
    if got.dtype not in (torch.float32, torch.float64):
        raise Mistake(
            "not_upcast",
            f"On {case.label}, the result has dtype {got.dtype}; expected torch.float32.",
        )
    if not _close(got, expected):
        detail = f"On {case.label}, your log-probabilities are {_show(got)}; "
        detail += f"expected {_show(expected)}"
        if _close(got, expected, 1e-2):  # float16's rounding
            raise Mistake("not_upcast", detail + " (within float16's rounding of them)")
        raise _diagnose(run, case, got, expected)
    run.ok("float16 logits give float32 log-probabilities (upcast before the softmax)")


def _check_empty_average(run: Runner, case: Case) -> None:
    """The rows with targets right; the row without one NaN, or the whole call a ValueError."""
    expected = run.expected(case).detach()  # (B,): NaN in row 1
    out = run.call(case, explain=explain_ce, via=_value_error_allowed)
    if isinstance(out, ValueError):
        return
    got = _as_logps(run, case, out, expected).detach()
    has = torch.isfinite(expected)  # (B,): the rows with a mean
    if not _close(got[has], expected[has]):
        where = first_difference(got[has], expected[has], atol=1e-4)
        raise Mistake("wrong_value", f"On {case.label}, the rows with targets: {where}.")
    if bool(torch.isfinite(got[~has]).any()):
        raise Mistake(
            "average_of_no_targets",
            f"On {case.label}, your log-probabilities are {_show(got)}: row 1, which has no "
            "target, got a number; expected NaN (or a ValueError).",
        )


def _as_logps(run: Runner, case: Case, out: object, expected: torch.Tensor) -> torch.Tensor:
    """``out`` if it is a ``(B,)`` float tensor; else the mistake it shows."""
    B = expected.shape[0]
    if isinstance(out, (tuple, list)) and (isinstance(out, list) or _per_row(out, B)):
        raise Mistake(
            "wrong_type",
            f"On {case.label}, your function returned a {type(out).__name__} of {len(out)} "
            f"items; expected one tensor of shape {tuple(expected.shape)}, a float per row "
            "(`torch.stack` the rows' values, or sum with `.sum(dim=-1)` on the whole batch).",
        )
    if isinstance(out, (tuple, list)):
        raise Mistake(
            "returns_tuple",
            f"On {case.label}, your function returned a {type(out).__name__} of {len(out)} items.",
        )
    if isinstance(out, torch.Tensor) and out.dim() == 0 and expected.dim() == 1:
        raise Mistake(
            "not_per_sequence",
            f"On {case.label}, your function returned one number ({float(out.detach()):.4f}); "
            f"expected one per sequence, shape {tuple(expected.shape)}.",
        )
    run.compare(case, out, expected, "the log-probabilities")
    assert isinstance(out, torch.Tensor)  # compare raised otherwise
    if not out.is_floating_point():
        raise Mistake("wrong_dtype", f"On {case.label}, the result has dtype {out.dtype}.")
    return out


def _per_row(out: tuple[object, ...] | list[object], rows: int) -> bool:
    """A sequence of one number (or 0-dim tensor) per row: values, not a tuple of extras."""
    return len(out) == rows and all(
        isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.dim() == 0) for v in out
    )


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-4) -> bool:
    """Every entry finite and within ``tol`` of ``want`` (relative above 1)."""
    g, w = got.detach().double(), want.detach().double()
    return bool(torch.isfinite(g).all()) and bool(
        ((g - w).abs() <= tol * w.abs().clamp(min=1.0)).all()
    )


def _show(values: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(v):.4f}" for v in values.detach()) + "]"


# --------------------------------------------------------------------------- known mistakes
# A docstring's ``{T}`` and ``{T1}`` are the case's T and T - 1 (:func:`_named`).

known = Catalogue("sequence_logprobs")


def _shifted(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits[:, :-1], labels[:, 1:])``: position t against token t + 1."""
    return logits[:, :-1].float(), labels[:, 1:]


def _gather(logps: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each position's entry of ``logps`` at its target (-100 read as id 0)."""
    return logps.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def _scored(logits, targets, average, mask=None, logps=lambda x: x.log_softmax(-1)):
    """Right from the positions on: ``targets`` (-100: no target) scored by ``logits`` through
    ``logps`` (right: the log-softmax over the vocabulary), summed per row over ``mask``
    (right: the targets), or averaged."""
    mask = targets != IGNORE_INDEX if mask is None else mask
    total = (_gather(logps(logits.float()), targets) * mask).sum(-1)
    return total / mask.sum(-1) if average else total


def _divided(logits, labels, average, by_sum=1, by_average=None):
    """Each row's right sum divided by ``by_sum`` without ``average``, by ``by_average`` with
    it (None: by its number of targets, right)."""
    logits, targets = _shifted(logits, labels)
    count = (targets != IGNORE_INDEX).sum(-1) if by_average is None else by_average
    return _scored(logits, targets, False) / (count if average else by_sum)


@known("not_shifted")
def shifts_the_logits_only(logits, labels, average=False):
    """`logits[:, :-1]` scored against `labels[:, :-1]`: the logits shifted, not the labels."""
    return _scored(logits[:, :-1], labels[:, :-1], average)


@known("not_shifted")
def slices_both_the_same_way(logits, labels, average=False):
    """`logits[:, 1:]` scored against `labels[:, 1:]`: both sliced the same way."""
    return _scored(logits[:, 1:], labels[:, 1:], average)


@known("not_shifted")
def never_shifts(logits, labels, average=False):
    """Position t scored against `labels[:, t]`."""
    return _scored(logits, labels, average)


@known("shifted_twice")
def shifts_twice(logits, labels, average=False):
    """Position t scored against `labels[:, t + 2]`."""
    rolled = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)
    return _scored(logits[:, :-1], rolled[:, 1:], average)


@known("shifted_wrong_way")
def shifts_the_wrong_way(logits, labels, average=False):
    """Position t scored against `labels[:, t - 1]`."""
    return _scored(logits[:, 1:], labels[:, :-1], average)


@known("shifts_across_rows")
def shifts_the_flat_batch(logits, labels, average=False):
    """The flattened batch shifted."""
    B, T = labels.shape
    flat = torch.cat([labels.reshape(-1)[1:], labels.new_full((1,), IGNORE_INDEX)])
    return _scored(logits, flat.view(B, T), average)


@known("scores_last_position")
def pads_shifted_labels_with_zero(logits, labels, average=False):
    """The last position scored against id 0."""
    return _scored(logits, F.pad(labels[:, 1:], (0, 1), value=0), average)


@known("softmax_wrong_dim")
def log_softmax_over_positions(logits, labels, average=False):
    """`log_softmax` over the positions (`dim=1`), not the vocabulary."""
    return _scored(*_shifted(logits, labels), average, logps=lambda x: x.log_softmax(dim=1))


@known("softmax_wrong_dim")
def log_softmax_over_all_positions(logits, labels, average=False):
    """`log_softmax` over the positions (`dim=1`), not the vocabulary, before the shift."""
    logps = _shifted(logits.float().log_softmax(dim=1), labels)
    return _scored(*logps, average, logps=lambda x: x)


@known("minus100_not_ignored")
def sums_every_position(logits, labels, average=False):
    """Every position summed, -100 read as id 0."""
    logits, targets = _shifted(logits, labels)
    return _scored(logits, targets, average, mask=torch.ones_like(targets, dtype=torch.bool))


@known("mask_not_shifted")
def masks_before_shifting(logits, labels, average=False):
    """`labels[:, 1:]` gathered under the mask `labels[:, :-1] != -100`."""
    return _scored(*_shifted(logits, labels), average, mask=labels[:, :-1] != IGNORE_INDEX)


@known("skips_target_zero")
def positive_labels_only(logits, labels, average=False):
    """The targets of id 0 left out."""
    logits, targets = _shifted(logits, labels)
    return _scored(logits, targets, average, mask=targets > 0)


@known("probs_not_logprobs")
def softmax_not_log_softmax(logits, labels, average=False):
    """The probabilities summed, not their logs."""
    return _scored(*_shifted(logits, labels), average, logps=lambda x: x.softmax(-1))


@known("gathers_raw_logits")
def forgets_the_normalisation(logits, labels, average=False):
    """The raw logits summed."""
    return _scored(*_shifted(logits, labels), average, logps=lambda x: x)


@known("argmax_not_label")
def scores_the_prediction(logits, labels, average=False):
    """The log-probability of the most likely token."""

    def best(x: torch.Tensor) -> torch.Tensor:  # each position's highest log-probability
        return x.log_softmax(-1).amax(dim=-1, keepdim=True).expand_as(x)

    return _scored(*_shifted(logits, labels), average, logps=best)


@known("negated_logprobs")
def returns_the_cross_entropy(logits, labels, average=False):
    """Minus the log-probabilities."""
    return _scored(*_shifted(logits, labels), average, logps=lambda x: -x.log_softmax(-1))


@known("mean_over_positions")
def means_instead_of_summing(logits, labels, average=False):
    """The sum / (T - 1) = {T1}."""
    return _divided(logits, labels, average, labels.shape[1] - 1)


@known("mean_over_positions")
def means_over_the_width(logits, labels, average=False):
    """The sum / T = {T}."""
    return _divided(logits, labels, average, labels.shape[1])


@known("ignores_average")
def always_sums(logits, labels, average=False):
    """The sum, not the mean."""
    return _divided(logits, labels, average, 1, 1)


@known("ignores_average")
def always_averages(logits, labels, average=False):
    """The mean, not the sum."""
    count = (labels[:, 1:] != IGNORE_INDEX).sum(-1).clamp(min=1)
    return _divided(logits, labels, average, count, count)


@known("counts_padding_positions")
def averages_over_the_shifted_width(logits, labels, average=False):
    """The sum / (T - 1) = {T1}."""
    return _divided(logits, labels, average, 1, labels.shape[1] - 1)


@known("counts_padding_positions")
def averages_over_the_width(logits, labels, average=False):
    """The sum / T = {T}."""
    return _divided(logits, labels, average, 1, labels.shape[1])


@known("counts_before_shift")
def counts_the_unshifted_labels(logits, labels, average=False):
    """The sum / the labels not -100 before the shift."""
    return _divided(logits, labels, average, 1, (labels != IGNORE_INDEX).sum(-1))


def _named(case: Case, got: torch.Tensor, expected: torch.Tensor) -> Mistake | None:
    """The known mistake whose result ``got`` equals (None if none does, or two codes do)."""
    T = case.args[1].shape[1]
    found = known.which(case, got, expected, _close, T=T, T1=T - 1)
    if found is None:
        return None
    return Mistake(
        found[0],
        f"On {case.label}, your log-probabilities are {_show(got)}, {found[1]}; "
        f"expected {_show(expected)}.",
    )


def _moves(run: Runner, case: Case, got: torch.Tensor) -> Mistake | None:
    """``minus100_not_ignored`` if the result changes when the logits change only where no
    target is scored (positions whose next label is -100, the last one)."""
    logits, labels = case.args
    keep = (shift(labels, 1) != IGNORE_INDEX).unsqueeze(-1)  # (B, T, 1)
    noise = torch.randn(logits.shape, generator=gen(99)) * 3.0
    changed = torch.where(keep, logits.detach(), logits.detach() + noise)
    probe = Case(
        f"{case.label}, logits changed where no target is scored", (changed, labels), case.kwargs
    )
    now = run.call(probe, explain=explain_ce)
    if isinstance(now, torch.Tensor) and now.shape == got.shape and _close(now, got):
        return None
    return Mistake(
        "minus100_not_ignored",
        f"On {case.label}, your log-probabilities are {_show(got)}; with the logits changed only "
        f"at positions whose next label is -100 they are {_show(now)}; expected no change.",
    )


def _not_finite(case: Case, got: torch.Tensor, expected: torch.Tensor) -> Mistake:
    """``log_of_softmax`` if a probability underflows to 0 in float32 on this case;
    ``nan_when_no_targets`` if exactly the rows without a target are not finite."""
    logits, labels = case.args
    detail = (
        f"On {case.label}, your log-probabilities are {_show(got)}; expected {_show(expected)}."
    )
    if bool((logits.detach().float().softmax(-1) == 0).any()):
        return Mistake("log_of_softmax", detail)
    empty = ~(labels[:, 1:] != IGNORE_INDEX).any(-1)  # (B,): rows without a target
    if torch.equal(~torch.isfinite(got.detach()), empty):
        rows = empty.nonzero().squeeze(-1).tolist()
        return Mistake(
            "nan_when_no_targets",
            f"{detail} Rows {rows} have no target after the shift: the log-probability of no "
            "token is the sum over none, 0 (DPO's sum).",
        )
    return Mistake("wrong_value", detail)


def _diagnose(run: Runner, case: Case, got: torch.Tensor, expected: torch.Tensor) -> Mistake:
    """The mistake a wrong ``got`` shows."""
    if not bool(torch.isfinite(got.detach()).all()):
        return _not_finite(case, got, expected)
    found = _named(case, got, expected) or _moves(run, case, got)
    if found is not None:
        return found
    where = first_difference(got, expected, atol=1e-4)
    return Mistake("wrong_value", f"On {case.label}, the log-probabilities: {where}.")


def cases() -> list[Case]:
    """Every case whose result the checker compares with the reference's, in order: the
    hand-written ones, the generated ones, then float16 logits (:func:`empty_average_case`
    comes last: a row without a mean)."""
    return _hand_written() + _generated() + [half_case()]


def check_sequence_logprobs(run: Runner) -> None:
    for k, case in enumerate(cases()[:-1]):
        expected = run.expected(case).detach()
        got = _as_logps(run, case, run.call(case, explain=explain_ce), expected)
        if not _close(got, expected):
            raise _diagnose(run, case, got, expected)
        run.passed_case(case)
        if k == 0:
            run.gradients(case, got)
            run.ok("backpropagates to the logits with the reference's gradient")
    _check_half(run, half_case())  # no line under "What was checked": cases 7 and 8 are the
    _check_empty_average(run, empty_average_case())  # task's corners, stated in its text
