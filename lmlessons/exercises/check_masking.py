"""Checker for the ``mask_tokens`` exercise (BERT's 80/10/10 input corruption).

Hidden cases, in order (the first failure is reported):
1. a small batch with default probabilities: return structure, input untouched, labels in the
   -100 convention, nothing special or padded selected, only selected positions changed;
2. exact corner cases: ``mlm_probability=0`` (nothing selected); ``mlm_probability=1`` with
   ``mask_replace_prob`` 1, 0 + ``random_replace_prob`` 0, and 0 + 1 (all [MASK], all kept,
   all random);
3. rates on a large batch with unusual probabilities (0.4 / 0.5 / 0.3), binomial tolerances;
4. the generator: one seed gives one result, different seeds differ, no global generator used.
"""

from __future__ import annotations

from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import Vocab, gen, mlm_batch
from lmlessons.exercises._runner import Mistake, Runner, check_seeds, global_rng_changed
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "mask_tokens(input_ids, *, mask_token_id, vocab_size, special_tokens_mask=None, "
    "mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1, generator=None) "
    "-> (masked_input_ids, labels)"
)


def _pos(index: torch.Tensor) -> str:
    b, t = (int(i) for i in index)
    return f"row {b}, position {t}"


def _explain(exc: BaseException) -> tuple[str, str] | None:
    text = str(exc)
    if isinstance(exc, ZeroDivisionError):
        return (
            "raised_exception",
            "With `mask_replace_prob=1.0` nothing is left for the random draw, and "
            "`random_replace_prob / (1 - mask_replace_prob)` divides by zero. Skip the random "
            "step in that case (transformers returns early when `mask_replace_prob == 1` or "
            "`random_replace_prob == 0`).",
        )
    if "bool" in text.lower() and ("mask" in text.lower() or "index" in text.lower()):
        return (
            "raised_exception",
            "`special_tokens_mask` holds 0/1 integers (as tokenizers return it). Convert it with "
            "`special_tokens_mask.bool()` before using it as a mask (`~` on an integer tensor is a "
            "bitwise not: ~1 == -2, not False).",
        )
    return None


class _Case:
    """One call's inputs, kept so the outputs can be compared with them."""

    def __init__(
        self,
        vocab: Vocab,
        ids: torch.Tensor,
        special: torch.Tensor,
        probs: dict[str, float],
        label: str,
    ):
        self.vocab = vocab
        self.ids = ids
        self.special = special
        self.probs = probs
        self.used_global: str | None = None  # a global generator the first call drew from
        prob_text = (
            ", ".join(f"{k}={v}" for k, v in probs.items()) if probs else "default probabilities"
        )
        self.text = (
            f"{label} ({vocab.describe()}; input_ids of shape {tuple(ids.shape)}; {prob_text})"
        )

    def kwargs(self) -> dict[str, Any]:
        return dict(
            mask_token_id=self.vocab.mask,
            vocab_size=self.vocab.size,
            special_tokens_mask=self.special,
            **self.probs,
        )

    def run(
        self, run: Runner, seed: int | None = 0, *, same_objects: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids_before, special_before = self.ids.clone(), self.special.clone()
        generator = None if seed is None else gen(seed)
        out = run.call(
            self.ids, **self.kwargs(), generator=generator, case=self.text, explain=_explain
        )
        masked, labels = _unpack(out, self)
        if masked is self.ids or labels is self.ids or not torch.equal(self.ids, ids_before):
            changed = int((self.ids != ids_before).sum())
            raise Mistake(
                "modifies_input",
                "modified `input_ids` in place",
                f"On {self.text}, `input_ids` itself was changed ({changed} positions differ "
                "after the call) or returned as the result. The caller still needs the original "
                "ids (the labels come from them, and the next epoch masks them afresh), so work "
                "on a copy: `masked = input_ids.clone()`, or `input_ids.masked_fill(...)`, which "
                "returns a new tensor.",
            )
        if not torch.equal(self.special, special_before):
            raise Mistake(
                "modifies_input",
                "modified `special_tokens_mask` in place",
                f"On {self.text}, `special_tokens_mask` was changed by the call. Build new tensors "
                "(`special_tokens_mask.bool()` makes a copy) instead of writing into the argument.",
            )
        self.ids, self.special = ids_before, special_before  # compare against pristine copies
        return masked, labels


def _unpack(out: Any, case: _Case) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(out, torch.Tensor) or not isinstance(out, (tuple, list)) or len(out) != 2:
        what = (
            f"a single tensor of shape {tuple(out.shape)}"
            if isinstance(out, torch.Tensor)
            else f"{type(out).__name__}"
            + (f" of {len(out)} items" if isinstance(out, (tuple, list)) else "")
        )
        raise Mistake(
            "wrong_return",
            "should return `(masked_input_ids, labels)`",
            f"On {case.text}, your function returned {what}. Return a pair: the corrupted input "
            "ids and the labels (original id where selected, -100 elsewhere).",
        )
    masked, labels = out
    for name, t in (("masked_input_ids", masked), ("labels", labels)):
        if not isinstance(t, torch.Tensor):
            raise Mistake(
                "wrong_return",
                f"`{name}` is not a tensor",
                f"On {case.text}, the returned `{name}` is a {type(t).__name__}; return torch "
                "tensors.",
            )
        if tuple(t.shape) != tuple(case.ids.shape):
            raise Mistake(
                "wrong_shape",
                f"`{name}` has the wrong shape",
                f"On {case.text}, `{name}` has shape {tuple(t.shape)}; it must have the shape of "
                f"`input_ids`, {tuple(case.ids.shape)}: one entry per input position.",
            )
    if labels.dtype == torch.bool:
        raise Mistake(
            "labels_are_boolean_mask",
            "`labels` is a boolean mask, not labels",
            f"On {case.text}, the second result is a boolean tensor (which positions were "
            "selected). The loss needs *labels*: the original token id at each selected position "
            "and -100 everywhere else (transformers' convention; `CrossEntropyLoss` ignores "
            "-100). For example `labels = torch.where(selected, input_ids, -100)`.",
        )
    for name, t in (("masked_input_ids", masked), ("labels", labels)):
        if t.dtype != case.ids.dtype:
            raise Mistake(
                "wrong_dtype",
                f"`{name}` has dtype {t.dtype}",
                f"On {case.text}, `{name}` has dtype {t.dtype}; token ids and labels must keep the "
                f"input's dtype, {case.ids.dtype} (`cross_entropy` needs torch.long targets).",
            )
    return masked, labels


def _check_label_values(case: _Case, masked: torch.Tensor, labels: torch.Tensor) -> None:
    """Every label is the original id (selected) or -100; name the mistake behind a wrong one."""
    ids, vocab = case.ids, case.vocab
    bad = (labels != IGNORE_INDEX) & (labels != ids)
    if not bool(bad.any()):
        return
    where = bad.nonzero()[0]
    got, orig = int(labels[tuple(where)]), int(ids[tuple(where)])
    replaced = bad & (masked != ids) & (labels == masked)
    if bool(replaced.any()) and int(replaced.sum()) == int(bad.sum()):
        raise Mistake(
            "labels_are_corrupted_ids",
            "labels hold the corrupted ids, not the originals",
            f"On {case.text}, at {_pos(where)} the label is {got} ({vocab.name(got)}), the id you "
            f"put into the input, but the original token there was {orig}. The model must learn "
            "to recover the *original* token: take the labels from `input_ids` before corrupting "
            "it.",
        )
    values = labels[bad].unique()
    if len(values) == 1:
        raise Mistake(
            "labels_not_ignored",
            "labels are not -100 at unselected positions",
            f"On {case.text}, {int(bad.sum())} positions have label {int(values[0])} although that "
            f"is not their token (e.g. {_pos(where)}, token {orig}). Positions that were not "
            "selected must have label -100 (transformers' convention), so the loss ignores them; "
            "any other value, 0 included, is a real class id that the model would be trained on.",
        )
    raise Mistake(
        "labels_wrong_values",
        "labels must be the original id or -100",
        f"On {case.text}, at {_pos(where)} the label is {got}, but the original token is {orig}. "
        "Each label must be either the original id (selected positions) or -100 (all others).",
    )


def _check_not_all_labelled(case: _Case, labels: torch.Tensor) -> None:
    """Catch ``labels = input_ids.clone()``: every (non-special) position has a label."""
    selected = labels != IGNORE_INDEX
    eligible = ~case.special.bool()
    if bool(selected.all()) or (
        int(eligible.sum()) >= 20
        and bool(selected[eligible].all())
        and case.probs.get("mlm_probability", 0.15) < 0.5
    ):
        raise Mistake(
            "labels_not_ignored",
            "labels are not -100 at unselected positions",
            f"On {case.text}, every "
            f"{'position' if bool(selected.all()) else 'non-special position'} has a label (it "
            "looks like `labels = input_ids.clone()`). Only the selected positions (about "
            "`mlm_probability` of them) may keep their id; set the label of every other position "
            "to -100 so the loss ignores it.",
        )


def _check_specials_untouched(case: _Case, masked: torch.Tensor, labels: torch.Tensor) -> None:
    ids, vocab = case.ids, case.vocab
    touched = ((labels != IGNORE_INDEX) | (masked != ids)) & case.special.bool()
    if not bool(touched.any()):
        return
    kinds: dict[str, int] = {}
    for token_id in ids[touched].tolist():
        kinds[vocab.name(token_id)] = kinds.get(vocab.name(token_id), 0) + 1
    listing = ", ".join(f"{n} x {k}" for k, n in sorted(kinds.items()))
    where = touched.nonzero()[0]
    raise Mistake(
        "masks_special_tokens",
        "special tokens or padding were selected",
        f"On {case.text}, special positions were selected for prediction or changed: {listing} "
        f"(first at {_pos(where)}). [CLS], [SEP] and [PAD] must never be selected: the model "
        "would learn to predict padding and the sentence structure would be corrupted. Exclude "
        "every position where `special_tokens_mask` is 1 before drawing the selection.\n\n"
        "If you compared ids with fixed numbers (101, 102, 0, ...): take them from the "
        "arguments instead, ids differ between tokenizers (here [CLS] is "
        f"{vocab.cls} and [PAD] is {vocab.pad}).",
    )


def _check_only_selected_changed(case: _Case, masked: torch.Tensor, labels: torch.Tensor) -> None:
    ids = case.ids
    sneaky = (masked != ids) & (labels == IGNORE_INDEX)
    if bool(sneaky.any()):
        where = sneaky.nonzero()[0]
        raise Mistake(
            "changed_unselected_positions",
            "changed tokens whose label is -100",
            f"On {case.text}, {int(sneaky.sum())} positions were changed in the input but have "
            f"label -100 (first at {_pos(where)}: {int(ids[tuple(where)])} -> "
            f"{int(masked[tuple(where)])}). Only selected positions may be corrupted, and each of "
            "them needs its original id as label, otherwise the model sees noise it is never "
            "asked to undo.",
        )


def _check_labels_and_specials(case: _Case, masked: torch.Tensor, labels: torch.Tensor) -> None:
    """The rules every result must follow, whatever the probabilities."""
    _check_label_values(case, masked, labels)
    _check_not_all_labelled(case, labels)
    _check_specials_untouched(case, masked, labels)
    _check_only_selected_changed(case, masked, labels)


def _check_global_rng(used: str | None, case: _Case) -> None:
    if used is None:
        return
    how = {
        "torch": "torch's global generator (a `torch.rand`, `torch.bernoulli` or "
        "`torch.randint` call without `generator=generator`)",
        "random": "Python's `random` module",
        "numpy": "NumPy's global generator (`np.random`)",
    }[used]
    raise Mistake(
        "uses_global_rng",
        "`generator` is not used for every random draw",
        f"On {case.text}, with a `generator` passed, your function still drew from {how}. Pass "
        "`generator=generator` to every random call, so one seed gives one result (a lesson that "
        "shows a masked batch must show the same batch on every run).",
    )


def _case_defaults(run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor) -> _Case:
    """Hidden case 1: a small batch with the default probabilities (also used for the generator
    checks, which need to know whether this first call drew from a global generator)."""
    case = _Case(vocab, ids, special, {}, "hidden case 1")
    before = run.rng_state()
    masked, labels = case.run(run, seed=0)
    case.used_global = global_rng_changed(before)
    run.ok("returns `(masked_input_ids, labels)` with the shape and dtype of `input_ids`")
    run.ok("leaves `input_ids` and `special_tokens_mask` unchanged")
    _check_labels_and_specials(case, masked, labels)
    run.ok("labels: the original id at selected positions, -100 everywhere else")
    run.ok("never selects special tokens or padding; changes only selected positions")
    return case


def _case_nothing_selected(
    run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor
) -> None:
    """Hidden case 2: ``mlm_probability=0`` selects and changes nothing."""
    c0 = _Case(vocab, ids, special, {"mlm_probability": 0.0}, "hidden case 2")
    masked, labels = c0.run(run, seed=1)
    if bool((labels != IGNORE_INDEX).any()) or not torch.equal(masked, ids):
        n_lab, n_chg = int((labels != IGNORE_INDEX).sum()), int((masked != ids).sum())
        code = "labels_not_ignored" if n_lab and not n_chg else "ignores_mlm_probability"
        raise Mistake(
            code,
            "with `mlm_probability=0` nothing may be selected",
            f"On {c0.text}, {n_lab} positions have a label other than -100 and {n_chg} input "
            "tokens changed; both must be 0. "
            + (
                "Set the label of every unselected position to -100."
                if code == "labels_not_ignored"
                else "Draw the selection with probability `mlm_probability` (not a fixed 0.15)."
            ),
        )
    _check_labels_and_specials(c0, masked, labels)


def _select_all(
    run: Runner,
    vocab: Vocab,
    ids: torch.Tensor,
    special: torch.Tensor,
    replace: tuple[float, float],
    number: int,
) -> tuple[_Case, torch.Tensor, torch.Tensor]:
    """Hidden case ``number``: ``mlm_probability=1`` with ``(mask_replace_prob,
    random_replace_prob) = replace``, seeded ``number - 1``; the rules every result follows."""
    probs = {
        "mlm_probability": 1.0,
        "mask_replace_prob": replace[0],
        "random_replace_prob": replace[1],
    }
    case = _Case(vocab, ids, special, probs, f"hidden case {number}")
    masked, labels = case.run(run, seed=number - 1)
    _check_labels_and_specials(case, masked, labels)
    return case, masked, labels


def _case_all_masked(run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor) -> None:
    """Hidden case 3: ``mlm_probability=1``, ``mask_replace_prob=1``: every eligible position
    is selected and becomes [MASK]."""
    eligible = ~special.bool()
    n_eligible = int(eligible.sum())
    c1, masked, labels = _select_all(run, vocab, ids, special, (1.0, 0.0), 3)
    n_sel = int((labels != IGNORE_INDEX)[eligible].sum())
    if n_sel != n_eligible:
        raise Mistake(
            "ignores_mlm_probability",
            "`mlm_probability` is not used for the selection",
            f"On {c1.text}, only {n_sel} of the {n_eligible} non-special positions were selected; "
            "with `mlm_probability=1.0` all of them must be. Draw the selection with probability "
            "`mlm_probability` (not a hard-coded 0.15).",
        )
    n_masked = int((masked == vocab.mask)[eligible].sum())
    if n_masked != n_eligible:
        raise Mistake(
            "ignores_replace_probs",
            "`mask_replace_prob` is ignored",
            f"On {c1.text}, {n_masked} of the {n_eligible} selected tokens became [MASK] "
            f"({pct(n_masked, n_eligible)}); with `mask_replace_prob=1.0` every one must. Use the "
            "`mask_replace_prob` and `random_replace_prob` arguments instead of fixed 0.8 / 0.1.",
        )
    run.ok(
        "`mlm_probability=0` selects nothing; `mlm_probability=1` selects every non-special "
        "position"
    )


def _case_all_kept(run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor) -> None:
    """Hidden case 4: every token selected, none replaced: the input comes back unchanged."""
    c2, masked, _ = _select_all(run, vocab, ids, special, (0.0, 0.0), 4)
    n_changed = int((masked != ids).sum())
    if n_changed:
        n_to_mask = int((masked == vocab.mask).sum())
        raise Mistake(
            "ignores_replace_probs",
            "`mask_replace_prob` / `random_replace_prob` are ignored",
            f"On {c2.text}, every selected token must keep its id (no [MASK], no random id), but "
            f"{n_changed} of {int((~special.bool()).sum())} changed ({n_to_mask} to [MASK]). Use "
            "the `mask_replace_prob` and `random_replace_prob` arguments instead of fixed 0.8 / "
            "0.1.",
        )


def _case_all_random(run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor) -> None:
    """Hidden case 5: every token selected and replaced by a random id in the vocabulary."""
    eligible = ~special.bool()
    n_eligible = int(eligible.sum())
    c3, masked, _ = _select_all(run, vocab, ids, special, (0.0, 1.0), 5)
    out_of_range = (masked < 0) | (masked >= vocab.size)
    if bool(out_of_range.any()):
        bad = int(masked[out_of_range][0])
        raise Mistake(
            "random_ids_out_of_range",
            "random replacements fall outside the vocabulary",
            f"On {c3.text}, a replacement id is {bad}, outside [0, vocab_size={vocab.size}). Draw "
            "random ids with `torch.randint(vocab_size, shape, generator=generator)`.",
        )
    n_kept = int((masked == ids)[eligible].sum())
    if not within(n_kept, n_eligible, 1.0 / vocab.size):
        raise Mistake(
            "ignores_replace_probs",
            "`random_replace_prob` is ignored",
            f"On {c3.text}, every selected token must become a random id (it equals the original "
            f"only by chance, 1 in {vocab.size}), but {n_kept} of {n_eligible} kept their id. Use "
            "`random_replace_prob` instead of a fixed 0.1.",
        )
    run.ok(
        "`mask_replace_prob` and `random_replace_prob` are honoured (all [MASK], all kept, all "
        "random)"
    )


def _rates_mistake(case: _Case, observed: str, other: int, n_sel: int, to_mask: int) -> Mistake:
    """Name what is wrong with a [MASK] / random / kept split that misses its probabilities."""
    p_mask, p_random = case.probs["mask_replace_prob"], case.probs["random_replace_prob"]
    v = case.vocab.size
    if within(other, n_sel, p_random * (1 - p_mask) * (v - 2) / v):
        return Mistake(
            "random_not_conditional",
            "too few random replacements: the random draw is not conditional",
            f"On {case.text}, {observed}. Your random share is `random_replace_prob * (1 - "
            "mask_replace_prob)`: among the tokens not turned into [MASK], draw the random "
            "replacement with probability `random_replace_prob / (1 - mask_replace_prob)` (as "
            "transformers does), or use one uniform draw per token split at the two thresholds.",
        )
    if abs(to_mask / n_sel - 0.8) < 0.05:
        return Mistake(
            "ignores_replace_probs",
            "`mask_replace_prob` / `random_replace_prob` are ignored",
            f"On {case.text}, {observed}: the split looks like a fixed 80/10/10. Use the "
            "arguments.",
        )
    return Mistake(
        "replacement_rates_off",
        "the [MASK] / random / keep split does not match the probabilities",
        f"On {case.text}, {observed}. Of the selected tokens, `mask_replace_prob` become [MASK], "
        "`random_replace_prob` a random id, and the rest keep their id.",
    )


def _case_rates(run: Runner) -> None:
    """Hidden case 6: the rates on a large batch with unusual probabilities (0.4 / 0.5 / 0.3)."""
    big_vocab = Vocab.make(seed=21, size=97)
    big_ids, big_special = mlm_batch(big_vocab, batch=64, length=64, seed=22)
    p, p_mask, p_random = 0.4, 0.5, 0.3
    probs = {"mlm_probability": p, "mask_replace_prob": p_mask, "random_replace_prob": p_random}
    c4 = _Case(big_vocab, big_ids, big_special, probs, "hidden case 6")
    masked, labels = c4.run(run, seed=5)
    _check_labels_and_specials(c4, masked, labels)
    sel = labels != IGNORE_INDEX
    n_elig, n_sel = int((~big_special.bool()).sum()), int(sel.sum())
    if not within(n_sel, n_elig, p):
        raise Mistake(
            "ignores_mlm_probability",
            "the selection rate is not `mlm_probability`",
            f"On {c4.text}, {n_sel} of {n_elig} non-special positions were selected "
            f"({pct(n_sel, n_elig)}); expected about {p:.0%}. Each non-special position must be "
            "selected independently with probability `mlm_probability`.",
        )
    v = big_vocab.size
    to_mask = int((masked == big_vocab.mask)[sel].sum())
    kept = int((masked == big_ids)[sel].sum())
    other = n_sel - to_mask - kept
    # a random draw can land on [MASK] or on the original token: 1 / v of the random share each
    exp_mask, exp_kept = p_mask + p_random / v, (1 - p_mask - p_random) + p_random / v
    exp_other = p_random * (v - 2) / v
    if not (
        within(to_mask, n_sel, exp_mask)
        and within(kept, n_sel, exp_kept)
        and within(other, n_sel, exp_other)
    ):
        observed = (
            f"observed among the {n_sel} selected: {pct(to_mask, n_sel)} [MASK], "
            f"{pct(other, n_sel)} random, {pct(kept, n_sel)} kept; expected about {exp_mask:.1%}, "
            f"{exp_other:.1%}, {exp_kept:.1%}"
        )
        raise _rates_mistake(c4, observed, other, n_sel, to_mask)
    run.ok(
        f"rates over {n_elig} positions match the probabilities (selection {pct(n_sel, n_elig)}; "
        f"[MASK] {pct(to_mask, n_sel)}, random {pct(other, n_sel)}, kept {pct(kept, n_sel)})"
    )


def _check_generator(run: Runner, case: _Case) -> None:
    """One seed gives one result, different seeds differ, nothing global is drawn from."""
    _check_global_rng(case.used_global, case)
    check_seeds(
        run,
        lambda seed: case.run(run, seed=seed),
        lambda a, b: torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]),
        not_deterministic=(
            "the same seed gave different results",
            f"On {case.text}, two calls with `generator=torch.Generator().manual_seed(0)` gave "
            "different masks. Every random draw must use `generator` (and nothing else random).",
        ),
        ignores_generator=f"On {case.text}, generators seeded 0, 1 and 2 all gave the same mask. "
        "Use the `generator` you are given (not one you create inside the function, and not a "
        "fixed `torch.manual_seed`).",
    )


def _explain_none(exc: BaseException) -> tuple[str, str]:
    return (
        "special_tokens_mask_none",
        "`special_tokens_mask=None` (the default) means that no position is excluded: handle "
        "it with `if special_tokens_mask is not None:` before using the mask.",
    )


def _case_no_special_mask(
    run: Runner, vocab: Vocab, ids: torch.Tensor, special: torch.Tensor
) -> None:
    """Hidden case 7: ``special_tokens_mask=None``: every position may be selected."""
    none_case = (
        f"hidden case 7 ({vocab.describe()}; input_ids of shape {tuple(ids.shape)}; "
        "special_tokens_mask=None)"
    )
    out = run.call(
        ids.clone(),
        mask_token_id=vocab.mask,
        vocab_size=vocab.size,
        special_tokens_mask=None,
        mlm_probability=1.0,
        mask_replace_prob=1.0,
        random_replace_prob=0.0,
        generator=gen(7),
        case=none_case + " with mlm_probability=1.0, mask_replace_prob=1.0",
        explain=_explain_none,
    )
    masked, labels = _unpack(out, _Case(vocab, ids, special, {}, "hidden case 7"))
    if not (torch.equal(labels, ids) and bool((masked == vocab.mask).all())):
        raise Mistake(
            "special_tokens_mask_none",
            "with `special_tokens_mask=None` every position may be selected",
            f"On {none_case} and mlm_probability=1.0, mask_replace_prob=1.0, every position must "
            "be selected and become [MASK]; yours left some out. Without a mask, no position is "
            "excluded.",
        )
    run.ok("`special_tokens_mask=None` excludes nothing")


def check_mask_tokens(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    vocab = Vocab.make(seed=11, size=61)
    ids, special = mlm_batch(vocab, batch=8, length=24, seed=12)
    case = _case_defaults(run, vocab, ids, special)
    _case_nothing_selected(run, vocab, ids, special)
    _case_all_masked(run, vocab, ids, special)
    _case_all_kept(run, vocab, ids, special)
    _case_all_random(run, vocab, ids, special)
    _case_rates(run)
    _check_generator(run, case)
    _case_no_special_mask(run, vocab, ids, special)
