"""Checker for ``mask_tokens`` (``DataCollatorForLanguageModeling.torch_mask_tokens``), in the
runner's pattern (:mod:`lmlessons.exercises._framework`). Any correct random procedure passes:
each result is held to the task's rules (:func:`_rules`), never to the reference's draws; rates
with binomial tolerances. 30 generated batches reach a single position, rows of special tokens
only, bool, 0/1 or no masks, ordinary tokens of id 0, probabilities 0, 1 and in between."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import POPULAR_SPECIAL_IDS, Vocab, gen, scattered_batch, vocab_batch
from lmlessons.exercises._framework import Case, Mistake, Runner, first_broken, on_empty
from lmlessons.exercises._stats import pct, too_even, within

SIGNATURE = (
    "mask_tokens(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, "
    "mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None) "
    "-> (masked_input_ids, labels)"
)
DEFAULTS = {"mlm_probability": 0.15, "mask_replace_prob": 0.8, "random_replace_prob": 0.1}


def _case(label: str, data: tuple[Vocab, Any, Any], seed: int, probs: tuple = ()) -> Case:
    vocab, ids, mask = data  # the vocabulary, `input_ids`, `special_tokens_mask`
    kwargs = dict(zip(DEFAULTS, probs), mask_token_id=vocab.mask, vocab_size=vocab.size)
    text = ", ".join(f"{k}={v:g}" for k, v in zip(DEFAULTS, probs)) or "default probabilities"
    if mask is None or mask.dtype == torch.bool:
        text += f"; special_tokens_mask={'None' if mask is None else 'a bool tensor'}"
    text = f"{label} ({vocab.describe()}; input_ids of shape {tuple(ids.shape)}; {text})"
    return Case(text, (ids,), kwargs | {"special_tokens_mask": mask}, seed=seed)


def _explain(case: Case, exc: BaseException) -> str | None:
    text, (p, pm, pr) = str(exc).lower(), (case.kwargs.get(k, v) for k, v in DEFAULTS.items())
    seen = {
        "divides_by_zero": isinstance(exc, ZeroDivisionError),
        "special_tokens_mask_none": case.kwargs["special_tokens_mask"] is None
        and "nonetype" in text,
        "int_mask_not_bool": "bool" in text and ("mask" in text or "index" in text),
        "fails_when_nothing_selected": on_empty(exc) and (p == 0 or pm == 1 or pr == 0),
    }
    return next((code for code, hit in seen.items() if hit), None)


def _rules(case: Case, masked: torch.Tensor, labels: torch.Tensor) -> tuple[list, torch.Tensor]:
    """``(code, positions that break it, what they show)`` per rule, and the eligible positions."""
    (ids,), kw, special = case.args, case.kwargs, case.kwargs["special_tokens_mask"]
    eligible = torch.ones_like(ids, dtype=torch.bool) if special is None else ~special.bool()
    p, pm, pr = (kw.get(k, v) for k, v in DEFAULTS.items())
    sel, changed = labels != IGNORE_INDEX, masked != ids
    bad, missing = sel & (labels != ids), eligible & ~sel & (p == 1)
    code = "labels_not_ignored" if labels[bad].unique().numel() == 1 else "wrong_value"
    if bool(changed[bad].all() and (labels[bad] == masked[bad]).all()):
        code = "labels_are_corrupted_ids"
    if not bad.any() and p < 0.5 and int(eligible.sum()) >= 20 and bool(sel[eligible].all()):
        bad, code = sel, "labels_not_ignored"  # `labels = input_ids.clone()`: labels everywhere
    lost = "hard_coded_special_ids" if set(ids[missing].tolist()) <= POPULAR_SPECIAL_IDS else ""
    lost = "special_tokens_mask_none" if special is None else lost or "ignores_mlm_probability"
    return [
        ("swapped_outputs", masked == IGNORE_INDEX, "hold -100 in the first result"),
        (code, bad, "have a label that is not -100, or not their token"),
        ("masks_special_tokens", (sel | changed) & ~eligible, "are special, yet selected"),
        ("changed_unselected_positions", changed & ~sel, "were changed but labelled -100"),
        ("random_ids_out_of_range", (masked < 0) | (masked >= kw["vocab_size"]), "hold bad ids"),
        ("ignores_mlm_probability", sel & (p == 0), "were selected"),
        (lost, missing, "were not selected"),  # hard-coded: id 0 taken for [PAD], say
        ("ignores_replace_probs", sel & (masked != kw["mask_token_id"]) & (pm == 1), "kept"),
        ("ignores_replace_probs", changed & (pm + pr == 0), "were changed"),
    ], eligible


def _result(run: Runner, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The learner's ``(masked, labels)`` on ``case``, held to the rules, and the eligible mask."""
    got = run.call(case, explain=lambda exc: _explain(case, exc))
    if isinstance(got, (tuple, list)) and getattr(got[-1], "dtype", None) == torch.bool:
        raise Mistake("labels_are_boolean_mask", f"On {case.label}, `labels` has dtype bool.")
    run.compare(case, got, run.expected(case))
    (ids,), (masked, labels) = case.args, got
    rules, eligible = _rules(case, masked, labels)
    first_broken(case, rules, {"token": ids, "masked": masked, "label": labels})
    return masked, labels, eligible


def _rates(run: Runner, p: float = 0.4, pm: float = 0.5, pr: float = 0.3) -> str:
    """The selection rate, the spread of the rows' counts and the [MASK] / random / kept split."""
    vocab, ids, _ = data = vocab_batch(21, size=97, batch=64, length=64)
    case = _case("hidden case 4", data, 5, (p, pm, pr))
    masked, labels, eligible = _result(run, case)
    sel, on, v = labels != IGNORE_INDEX, f"On {case.label}", vocab.size
    n_el, n_sel = int(eligible.sum()), int(sel.sum())
    seen = f"{n_sel} of {n_el} non-special positions were selected ({pct(n_sel, n_el)})"
    if not within(n_sel, n_el, p):
        raise Mistake("ignores_mlm_probability", f"{on}, {seen}; expected about {p:.0%}.")
    if too_even(sel.sum(1).tolist(), eligible.sum(1).tolist(), p):
        raise Mistake("selects_exact_count", f"{on}, {seen}, nearly the same share in every row.")
    split = [int((masked == vocab.mask)[sel].sum()), 0, int((masked == ids)[sel].sum())]
    split[1] = n_sel - split[0] - split[2]
    # a random id can land on [MASK] or on the original token: 1 / v of the random share each
    want = (pm + pr / v, pr * (v - 2) / v, 1 - pm - pr + pr / v)
    seen = ", ".join(f"{pct(k, n_sel)} {w}" for k, w in zip(split, ("[MASK]", "random", "kept")))
    seen += f" (expected {', '.join(f'{e:.1%}' for e in want)})"
    if not all(within(k, n_sel, e) for k, e in zip(split, want)):
        unscaled = within(split[1], n_sel, pr * (1 - pm) * (v - 2) / v)  # pr among the rest
        code = "random_not_conditional" if unscaled else "replacement_rates_off"
        if not unscaled and abs(split[0] / n_sel - 0.8) < 0.05:
            code = "ignores_replace_probs"  # BERT's fixed 80/10/10
        raise Mistake(code, f"{on}, of the {n_sel} selected: {seen}.")
    return f"rates over {n_el} positions: selection {pct(n_sel, n_el)}; {seen}"


def _uniform(run: Runner) -> str:
    """Every selected token replaced by a random id: each id of the vocabulary about as often."""
    vocab, _, _ = data = vocab_batch(31, size=40, batch=64, length=40)
    case = _case("hidden case 5", data, 6, (1.0, 0.0, 1.0))
    masked, _, eligible = _result(run, case)
    n, drawn, v = int(eligible.sum()), masked[eligible], vocab.size
    counts = torch.bincount(drawn, minlength=v).tolist()
    odd = [i for i, k in enumerate(counts) if not within(k, n, 1 / v)] + [0]
    seen = f"{vocab.name(odd[0])} came {counts[odd[0]]} times in {n}; expected about {n / v:.0f}"
    if len(odd) > 1:
        raise Mistake("random_ids_not_uniform", f"On {case.label}, {seen}.")
    return f"random ids: each of the {v} ids about equally often (id 0 and [MASK] included)"


def check_mask_tokens(run: Runner) -> None:
    data = vocab_batch(11, size=61, batch=8, length=24)
    data[1][:, 1:3] = 0  # ordinary tokens of id 0 ([PAD] in BERT's vocabulary): targets of id 0
    _result(run, first := _case("hidden case 1", data, 0))
    run.ok("returns `(masked_input_ids, labels)` like `input_ids`; leaves the arguments unchanged")
    run.ok("labels: the original id (id 0 too) where selected, else -100; never a special token")
    corners = [(0.0, 0.8, 0.1, data[2]), (1.0, 1.0, 0.0, data[2]), (1.0, 0.0, 0.0, data[2])]
    for i, (*ps, mask) in enumerate([*corners, (1.0, 1.0, 0.0, None)]):
        _result(run, _case(f"hidden case 2.{i + 1}", (*data[:2], mask), i, tuple(ps)))
    run.ok("`mlm_probability` 0 and 1; `mask_replace_prob=1`; `special_tokens_mask=None`")
    g = gen(8)
    for i in range(30):  # generated: one position, rows of special tokens only, odd masks
        data = scattered_batch(g, i)
        p, pm, r = (round(float(x), 2) for x in torch.rand(3, generator=g))
        p, pm = (0.0, 1.0, p)[i // 3 % 3], (0.0, 1.0, pm)[i // 2 % 3]
        probs = (p, pm, int(100 * (1 - pm) * r) / 100 if i % 4 else 0.0)
        mask = (data[2].long(), data[2], None)[i % 3]
        _result(run, _case(f"generated case {i + 1}", (*data[:2], mask), 400 + i, probs))
    run.ok("the same rules on 30 generated batches (one position, rows of special tokens only)")
    run.ok(_rates(run))
    run.ok(_uniform(run))
    run.generator_contract(lambda seed: _result(run, replace(first, seed=seed))[:2])
