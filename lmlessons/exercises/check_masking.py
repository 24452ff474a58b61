"""Checker for ``mask_tokens`` (``DataCollatorForLanguageModeling.torch_mask_tokens``), in the
runner's pattern (:mod:`lmlessons.exercises._framework`). Any correct random procedure passes:
each result is held to the task's rules (:func:`_rules`), never to the reference's draws; rates
with binomial tolerances. 30 generated batches (:data:`GENERATED`) reach a single position, rows
of special tokens only, bool, 0/1 or no masks, ordinary tokens of id 0, probabilities 0, 1 and in
between."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import (
    DRAWN,
    POPULAR_SPECIAL_IDS,
    Vocab,
    gen,
    scattered_batch,
    vocab_batch,
)
from lmlessons.exercises._framework import Case, Mistake, Runner, first_broken, on_empty
from lmlessons.exercises._stats import pct, too_even, within

SIGNATURE = (
    "mask_tokens(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, "
    "mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None) "
    "-> (masked_input_ids, labels)"
)
DEFAULTS = {"mlm_probability": 0.15, "mask_replace_prob": 0.8, "random_replace_prob": 0.1}


@dataclass(frozen=True)
class Probabilities:
    """A row of a case table: the three probabilities (numbers, or :data:`DRAWN`) and the kind
    of ``special_tokens_mask``: ``"long"`` (0/1, as tokenizers return it), ``"bool"`` or None."""

    mlm_probability: float | str
    mask_replace_prob: float | str
    random_replace_prob: float | str  # DRAWN: a draw scaled to at most 1 - mask_replace_prob
    special_tokens_mask: str | None = "long"


#: Hidden case 2: the probabilities at their corners, then no ``special_tokens_mask``.
CORNERS = [
    Probabilities(0.0, 0.8, 0.1),
    Probabilities(1.0, 1.0, 0.0),
    Probabilities(1.0, 0.0, 0.0),
    Probabilities(1.0, 1.0, 0.0, None),
]


def _rows(table: str) -> list[Probabilities]:
    """The rows of a case table written ``<p><pm><pr><mask>`` each: ``0``, ``1`` or ``d``
    (:data:`DRAWN`) per probability, then ``l`` (long), ``b`` (bool) or ``n`` (no mask)."""
    value: dict[str, float | str] = {"0": 0.0, "1": 1.0, "d": DRAWN}
    kind = {"l": "long", "b": "bool", "n": None}
    return [Probabilities(value[r[0]], value[r[1]], value[r[2]], kind[r[3]]) for r in table.split()]


#: The generated cases, in order (their batches: :func:`._cases.scattered_batch`).
GENERATED = _rows(
    "000l 00db 01dn 11dl 1d0b 1ddn d0dl d0db d10n 01dl 0ddb 0ddn 100l 10db 11dn "
    "d1dl dd0b dddn 00dl 00db 010n 11dl 1ddb 1ddn d00l d0db d1dn 01dl 0d0b 0ddn"
)


def _case(label: str, data: tuple[Vocab, Any, Any], seed: int, probs: tuple = ()) -> Case:
    """``data``: the vocabulary, ``input_ids`` and ``special_tokens_mask``; ``probs``: the
    probabilities in the order of :data:`DEFAULTS` (none: the defaults)."""
    vocab, ids, mask = data
    kwargs = dict(zip(DEFAULTS, probs))
    kwargs["mask_token_id"] = vocab.mask
    kwargs["vocab_size"] = vocab.size
    kwargs["special_tokens_mask"] = mask
    text = ", ".join(f"{k}={v:g}" for k, v in zip(DEFAULTS, probs)) or "default probabilities"
    if mask is None:
        text += "; special_tokens_mask=None"
    elif mask.dtype == torch.bool:
        text += "; special_tokens_mask=a bool tensor"
    text = f"{label} ({vocab.describe()}; input_ids of shape {tuple(ids.shape)}; {text})"
    return Case(text, (ids,), kwargs, seed=seed)


def _probabilities(case: Case) -> tuple[float, float, float]:
    """``(mlm_probability, mask_replace_prob, random_replace_prob)`` of ``case``."""
    p, pm, pr = (case.kwargs.get(name, value) for name, value in DEFAULTS.items())
    return p, pm, pr


def _drawn(setting: float | str, draw: float) -> float:
    """A probability of a case table: the number, or ``draw`` for :data:`DRAWN`."""
    return draw if setting == DRAWN else float(setting)


def _row_case(
    label: str, row: Probabilities, data: tuple, seed: int, draws: tuple = (0, 0, 0)
) -> Case:
    """The case of a table ``row`` on ``data`` (its special mask as ``row`` says), :data:`DRAWN`
    probabilities from ``draws`` (three, rounded; the corners draw nothing)."""
    vocab, ids, special = data
    mask = {"long": special.long(), "bool": special, None: None}[row.special_tokens_mask]
    p = _drawn(row.mlm_probability, draws[0])
    pm = _drawn(row.mask_replace_prob, draws[1])
    pr = _drawn(row.random_replace_prob, int(100 * (1 - pm) * draws[2]) / 100)  # <= 1 - pm
    return _case(label, (vocab, ids, mask), seed, (p, pm, pr))


def _explain(case: Case, exc: BaseException) -> str | None:
    text = str(exc).lower()
    p, pm, pr = _probabilities(case)
    seen = {
        "divides_by_zero": isinstance(exc, ZeroDivisionError),
        "special_tokens_mask_none": case.kwargs["special_tokens_mask"] is None
        and "nonetype" in text,
        "int_mask_not_bool": "bool" in text and ("mask" in text or "index" in text),
        "fails_when_nothing_selected": on_empty(exc) and (p == 0 or pm == 1 or pr == 0),
    }
    return next((code for code, hit in seen.items() if hit), None)


def _label_rule(
    ids: torch.Tensor, masked: torch.Tensor, labels: torch.Tensor, eligible: torch.Tensor, p: float
) -> tuple[str, torch.Tensor]:
    """The code and the positions of wrong labels: selected, yet not their token."""
    selected = labels != IGNORE_INDEX
    bad = selected & (labels != ids)
    code = "labels_not_ignored" if labels[bad].unique().numel() == 1 else "wrong_value"
    if bool((masked != ids)[bad].all() and (labels[bad] == masked[bad]).all()):
        code = "labels_are_corrupted_ids"
    many = int(eligible.sum()) >= 20
    if not bad.any() and p < 0.5 and many and bool(selected[eligible].all()):
        return "labels_not_ignored", selected  # `labels = input_ids.clone()`: labels everywhere
    return code, bad


def _missed_code(ids: torch.Tensor, missing: torch.Tensor, special: Any) -> str:
    """Why eligible positions were not selected at ``mlm_probability=1``."""
    if special is None:
        return "special_tokens_mask_none"
    if set(ids[missing].tolist()) <= POPULAR_SPECIAL_IDS:
        return "hard_coded_special_ids"  # id 0 taken for [PAD], say
    return "ignores_mlm_probability"


def _rules(case: Case, masked: torch.Tensor, labels: torch.Tensor) -> tuple[list, torch.Tensor]:
    """``(code, positions that break it, what they show)`` per rule, and the eligible positions."""
    ids = case.args[0]
    special = case.kwargs["special_tokens_mask"]
    eligible = torch.ones_like(ids, dtype=torch.bool) if special is None else ~special.bool()
    p, pm, pr = _probabilities(case)
    selected = labels != IGNORE_INDEX
    changed = masked != ids
    missing = eligible & ~selected & (p == 1)
    label_code, bad_labels = _label_rule(ids, masked, labels, eligible, p)
    out_of_range = (masked < 0) | (masked >= case.kwargs["vocab_size"])
    not_mask = masked != case.kwargs["mask_token_id"]
    return [
        ("swapped_outputs", masked == IGNORE_INDEX, "hold -100 in the first result"),
        (label_code, bad_labels, "have a label that is not -100, or not their token"),
        ("masks_special_tokens", (selected | changed) & ~eligible, "are special, yet selected"),
        ("changed_unselected_positions", changed & ~selected, "were changed but labelled -100"),
        ("random_ids_out_of_range", out_of_range, "hold bad ids"),
        ("ignores_mlm_probability", selected & (p == 0), "were selected"),
        (_missed_code(ids, missing, special), missing, "were not selected"),
        ("ignores_replace_probs", selected & not_mask & (pm == 1), "kept"),
        ("ignores_replace_probs", changed & (pm + pr == 0), "were changed"),
    ], eligible


def _result(run: Runner, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The learner's ``(masked, labels)`` on ``case``, held to the rules, and the eligible mask."""
    got = run.call(case, explain=lambda exc: _explain(case, exc))
    if isinstance(got, (tuple, list)) and getattr(got[-1], "dtype", None) == torch.bool:
        raise Mistake("labels_are_boolean_mask", f"On {case.label}, `labels` has dtype bool.")
    run.compare(case, got, run.expected(case))
    ids = case.args[0]
    masked, labels = got
    rules, eligible = _rules(case, masked, labels)
    first_broken(case, rules, {"token": ids, "masked": masked, "label": labels})
    return masked, labels, eligible


def _split_mistake(split: list[int], n_sel: int, pm: float, pr: float, v: int) -> str:
    """The code of a wrong [MASK] / random / kept split of ``n_sel`` selected positions."""
    unscaled = within(split[1], n_sel, pr * (1 - pm) * (v - 2) / v)  # pr among the rest
    if unscaled:
        return "random_not_conditional"
    if abs(split[0] / n_sel - 0.8) < 0.05:
        return "ignores_replace_probs"  # BERT's fixed 80/10/10
    return "replacement_rates_off"


def _rates(run: Runner, p: float = 0.4, pm: float = 0.5, pr: float = 0.3) -> str:
    """The selection rate, the spread of the rows' counts and the [MASK] / random / kept split."""
    data = vocab_batch(21, size=97, batch=64, length=64)
    vocab, ids, _ = data
    case = _case("hidden case 4", data, 5, (p, pm, pr))
    masked, labels, eligible = _result(run, case)
    selected = labels != IGNORE_INDEX
    on = f"On {case.label}"
    v = vocab.size
    n_el = int(eligible.sum())
    n_sel = int(selected.sum())
    seen = f"{n_sel} of {n_el} non-special positions were selected ({pct(n_sel, n_el)})"
    if not within(n_sel, n_el, p):
        raise Mistake("ignores_mlm_probability", f"{on}, {seen}; expected about {p:.0%}.")
    if too_even(selected.sum(1).tolist(), eligible.sum(1).tolist(), p):
        raise Mistake("selects_exact_count", f"{on}, {seen}, nearly the same share in every row.")
    as_mask = int((masked == vocab.mask)[selected].sum())
    kept = int((masked == ids)[selected].sum())
    split = [as_mask, n_sel - as_mask - kept, kept]
    # a random id can land on [MASK] or on the original token: 1 / v of the random share each
    want = (pm + pr / v, pr * (v - 2) / v, 1 - pm - pr + pr / v)
    seen = ", ".join(f"{pct(k, n_sel)} {w}" for k, w in zip(split, ("[MASK]", "random", "kept")))
    seen += f" (expected {', '.join(f'{e:.1%}' for e in want)})"
    if not all(within(k, n_sel, e) for k, e in zip(split, want)):
        code = _split_mistake(split, n_sel, pm, pr, v)
        raise Mistake(code, f"{on}, of the {n_sel} selected: {seen}.")
    return f"rates over {n_el} positions: selection {pct(n_sel, n_el)}; {seen}"


def _uniform(run: Runner) -> str:
    """Every selected token replaced by a random id: each id of the vocabulary about as often."""
    data = vocab_batch(31, size=40, batch=64, length=40)
    vocab = data[0]
    case = _case("hidden case 5", data, 6, (1.0, 0.0, 1.0))
    masked, _, eligible = _result(run, case)
    n = int(eligible.sum())
    v = vocab.size
    counts = torch.bincount(masked[eligible], minlength=v).tolist()
    odd = [i for i, k in enumerate(counts) if not within(k, n, 1 / v)]
    if odd:
        seen = f"{vocab.name(odd[0])} came {counts[odd[0]]} times in {n}"
        raise Mistake(
            "random_ids_not_uniform", f"On {case.label}, {seen}; expected about {n / v:.0f}."
        )
    return f"random ids: each of the {v} ids about equally often (id 0 and [MASK] included)"


def _generated(run: Runner) -> None:
    """The rules on the batches of :data:`GENERATED`."""
    g = gen(8)
    for i, row in enumerate(GENERATED):
        data = scattered_batch(g, i)
        draws = tuple(round(float(x), 2) for x in torch.rand(3, generator=g))
        _result(run, _row_case(f"generated case {i + 1}", row, data, 400 + i, draws))


def check_mask_tokens(run: Runner) -> None:
    data = vocab_batch(11, size=61, batch=8, length=24)
    data[1][:, 1:3] = 0  # ordinary tokens of id 0 ([PAD] in BERT's vocabulary): targets of id 0
    first = _case("hidden case 1", data, 0)
    _result(run, first)
    run.ok("returns `(masked_input_ids, labels)` like `input_ids`; leaves the arguments unchanged")
    run.ok("labels: the original id (id 0 too) where selected, else -100; never a special token")
    for i, row in enumerate(CORNERS):
        _result(run, _row_case(f"hidden case 2.{i + 1}", row, data, i))
    run.ok("`mlm_probability` 0 and 1; `mask_replace_prob=1`; `special_tokens_mask=None`")
    _generated(run)
    run.ok("the same rules on 30 generated batches (one position, rows of special tokens only)")
    run.ok(_rates(run))
    run.ok(_uniform(run))
    run.generator_contract(lambda seed: _result(run, replace(first, seed=seed))[:2])
