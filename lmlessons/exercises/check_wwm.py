"""Checker for the ``select_whole_words`` exercise (Google BERT's whole-word masking selection).

Any correct random procedure passes, not only the package's: the checker tests properties, never
bit-equality. Google's recipe: the row's count is ``num_to_predict(real length, p, cap)``; words
are visited in random order and a word is taken whole if it fits in what is left of the count.
So every result is *maximal*: no unselected word fits in the remaining budget. Hidden cases, in
order (the first failure is reported):
1. structure: a ``(B, T)`` mask, arguments unchanged, never a special token or padding, every
   piece of a word selected or none;
2. the count on rows of one-piece words (every word fits, so the count is reached exactly, in
   every one of 20 copies of each row): the formula, the real length from ``attention_mask``;
3. multi-piece words: never more pieces than the count, and maximal (a word that fits is taken);
   then ``max_predictions_per_seq``;
4. statistics over 300 copies of one row (``attention_mask=None``): twelve 2-piece words are each
   selected about 1/4 of the time; a 3-piece word among six 1-piece words with a count of 3 is
   selected 1/7 of the time (it must come first in the random order), not 3/9;
5. the generator: one seed gives one result, different seeds differ, no global generator used;
6. padding that only ``attention_mask`` marks is never selected; ``mlm_probability=0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lmlessons.exercises._cases import gen
from lmlessons.exercises._runner import Mistake, Runner, check_seeds, global_rng_changed
from lmlessons.exercises._stats import pct, within
from lmlessons.masking_variants import num_to_predict

SIGNATURE = (
    "select_whole_words(special_tokens_mask, is_continuation, *, attention_mask=None, "
    "mlm_probability=0.15, max_predictions_per_seq=20, generator=None) -> selected   # (B, T) bool"
)

#: A row: the word lengths (in pieces) of each segment, and the number of [PAD] after it.
RowSpec = tuple[tuple[tuple[int, ...], ...], int]


@dataclass
class Batch:
    """Inputs of one call and what the checker needs to judge its output."""

    special: torch.Tensor  # (B, T) long 0/1, as tokenizers return it
    cont: torch.Tensor  # (B, T) bool, True at "##" pieces
    attn: torch.Tensor  # (B, T) long 0/1
    words: list[list[list[int]]]  # words[b][w] = positions of word w of row b
    lengths: list[int]  # real length of each row ([CLS] and [SEP] included)

    def eligible(self) -> torch.Tensor:
        return (self.special == 0) & (self.attn == 1)


def make_batch(rows: list[RowSpec], *, pad_is_special: bool = True) -> Batch:
    """``[CLS] words [SEP] words [SEP] [PAD]...`` rows from their word lengths."""
    lengths = [2 + sum(sum(seg) + 1 for seg in segs) - 1 for segs, _ in rows]
    T = max(n + pad for n, (_, pad) in zip(lengths, rows))
    special = torch.ones((len(rows), T), dtype=torch.long)
    cont = torch.zeros((len(rows), T), dtype=torch.bool)
    attn = torch.zeros((len(rows), T), dtype=torch.long)
    words: list[list[list[int]]] = []
    for r, (segs, _) in enumerate(rows):
        t, row_words = 1, []  # position 0 is [CLS]
        for seg in segs:
            for n in seg:
                row_words.append(list(range(t, t + n)))
                special[r, t : t + n] = 0
                cont[r, t + 1 : t + n] = True
                t += n
            t += 1  # [SEP]
        attn[r, : lengths[r]] = 1
        if not pad_is_special:
            special[r, lengths[r] :] = 0
        words.append(row_words)
    return Batch(special, cont, attn, words, lengths)


def _explain(exc: BaseException) -> tuple[str, str] | None:
    text = str(exc).lower()
    if "bool" in text or "bitwise" in text:
        return (
            "raised_exception",
            "`special_tokens_mask` and `attention_mask` hold 0/1 integers (as tokenizers return "
            "them): convert them with `.bool()` before using `~`, `&` or indexing (`~` on an "
            "integer tensor is a bitwise not: ~1 == -2).",
        )
    if "nonetype" in text:
        return (
            "attention_mask_none",
            "`attention_mask=None` (the default) means every position is real: the row length "
            "is then `T`. Handle it with `if attention_mask is not None:`.",
        )
    return None


class _Call:
    """One call's inputs; ``attention=False`` passes ``attention_mask=None`` (no padding)."""

    def __init__(self, batch: Batch, label: str, *, attention: bool = True, **kwargs: Any) -> None:
        self.batch, self.kwargs, self.attention = batch, kwargs, attention
        self.used_global: str | None = None  # a global generator the first call drew from
        B, T = batch.special.shape
        args = ", ".join(
            [f"{k}={v}" for k, v in kwargs.items()] + ([] if attention else ["attention_mask=None"])
        )
        self.text = f"{label} ({B} rows of {T} positions; {args or 'default arguments'})"

    def budget(self, row: int, *, length: int | None = None) -> int:
        p = self.kwargs.get("mlm_probability", 0.15)
        cap = self.kwargs.get("max_predictions_per_seq", 20)
        return num_to_predict(self.batch.lengths[row] if length is None else length, p, cap)

    def run(self, run: Runner, generator: torch.Generator | None) -> torch.Tensor:
        b = self.batch
        inputs = (b.special.clone(), b.cont.clone())
        attn = b.attn.clone() if self.attention else None
        out = run.call(
            *inputs,
            attention_mask=attn,
            **self.kwargs,
            generator=generator,
            case=self.text,
            explain=_explain,
        )
        if not (
            torch.equal(inputs[0], b.special)
            and torch.equal(inputs[1], b.cont)
            and (attn is None or torch.equal(attn, b.attn))
        ):
            raise Mistake(
                "modifies_input",
                "modified an argument in place",
                f"On {self.text}, `special_tokens_mask`, `is_continuation` or `attention_mask` "
                "changed during the call. Build new tensors (`.bool()` makes a copy) instead of "
                "writing into the arguments: the collator uses them again.",
            )
        return _as_mask(out, b, self.text)


def _as_mask(out: Any, batch: Batch, case: str) -> torch.Tensor:
    shape = tuple(batch.special.shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        what = (
            f"a tensor of shape {tuple(out.shape)}"
            if isinstance(out, torch.Tensor)
            else f"a {type(out).__name__}"
        )
        raise Mistake(
            "wrong_return",
            "should return a `(B, T)` bool mask",
            f"On {case}, your function returned {what}. Return one bool tensor of shape {shape} "
            "(the shape of `special_tokens_mask`), True at the selected positions.",
        )
    if out.dtype != torch.bool and not bool(((out == 0) | (out == 1)).all()):
        raise Mistake(
            "wrong_return",
            "should return a `(B, T)` bool mask",
            f"On {case}, the result holds values other than 0 and 1 (dtype {out.dtype}). Return "
            "a bool tensor, True at the selected positions.",
        )
    return out.bool()


def _check_structure(call: _Call, sel: torch.Tensor) -> None:
    """No special token, no padding, whole words."""
    b = call.batch
    bad = sel & (b.special == 1)
    if bool(bad.any()):
        r, t = (int(i) for i in bad.nonzero()[0])
        raise Mistake(
            "selects_special_tokens",
            "special tokens or padding were selected",
            f"On {call.text}, {int(bad.sum())} positions where `special_tokens_mask` is 1 were "
            f"selected (first: row {r}, position {t}). [CLS], [SEP] and [PAD] are not words: "
            "exclude every position where `special_tokens_mask` is 1 before building the words.",
        )
    pad = sel & (b.attn == 0)
    if bool(pad.any()):
        r, t = (int(i) for i in pad.nonzero()[0])
        raise Mistake(
            "selects_padding",
            "padding was selected",
            f"On {call.text}, {int(pad.sum())} positions where `attention_mask` is 0 were selected "
            f"(first: row {r}, position {t}), although `special_tokens_mask` does not mark them "
            "here. Padding is never a target: a position is eligible only where "
            "`special_tokens_mask` is 0 *and* `attention_mask` is 1.",
        )
    rows = sel.tolist()
    for r, row_words in enumerate(b.words):
        for w in row_words:
            n_sel = sum(rows[r][t] for t in w)
            if 0 < n_sel < len(w):
                raise Mistake(
                    "splits_words",
                    "a word was split: some of its pieces selected, others not",
                    f"On {call.text}, in row {r} the word at positions {w[0]}..{w[-1]} "
                    f"({len(w)} pieces) has {n_sel} selected. Whole-word masking "
                    "selects every piece of a word or none: group the positions into words "
                    "first (a word starts at a token that is not a `##` continuation), then "
                    "choose among words.",
                )


def _case_structure(run: Runner) -> _Call:
    """Hidden case 1: varied rows of multi-piece words, padding marked special."""
    rows: list[RowSpec] = [
        (((1, 3, 2, 1, 2), (2, 1, 4)), 0),
        (((2, 2, 1, 3), (1, 2)), 4),
        (((4, 1, 1), (3, 2, 1, 1)), 2),
        (((1, 1, 2, 2, 3, 1), (2,)), 1),
        (((3,), (1, 1)), 9),
        (((2, 1, 2, 1, 2, 1), (1, 2, 1)), 0),
    ]
    call = _Call(make_batch(rows), "hidden case 1", mlm_probability=0.4)
    before = run.rng_state()
    sel = call.run(run, gen(0))
    call.used_global = global_rng_changed(before)
    run.ok("returns a `(B, T)` mask; the arguments stay unchanged")
    _check_structure(call, sel)
    run.ok("never selects [CLS], [SEP] or padding; every word is selected whole or not at all")
    return call


def _count_mistake(call: _Call, row: int, got: int) -> Mistake:
    """Name why row ``row`` has ``got`` targets instead of the count (all words fit)."""
    n, want = call.batch.lengths[row], call.budget(row)
    p = call.kwargs.get("mlm_probability", 0.15)
    T = call.batch.special.shape[1]
    where = f"On {call.text}, row {row} ({n} real tokens, [CLS] and [SEP] included)"
    if n < T and got == call.budget(row, length=T) != want:
        return Mistake(
            "count_from_padded_length",
            "the count is computed from the padded length",
            f"{where} got {got} targets: the count of a row of {T} positions. Padding is not "
            f"text: the row length is `attention_mask[b].sum()` = {n}, so the count is "
            f"num_to_predict({n}) = {want}.",
        )
    cap = call.kwargs.get("max_predictions_per_seq", 20)
    if cap is not None and got > cap:
        return Mistake(
            "ignores_max_predictions",
            "`max_predictions_per_seq` is ignored",
            f"{where} got {got} targets, above `max_predictions_per_seq={cap}`. The count is "
            "`min(max_predictions_per_seq, max(1, round(length * mlm_probability)))`.",
        )
    return Mistake(
        "wrong_count_formula",
        "the number of targets is not Google's count",
        f"{where} got {got} targets; expected min({cap}, max(1, round({n} * {p}))) = {want}. "
        "Every word here is one piece, so the count is always reached. Use `round` (not "
        "`int`), count [CLS] and [SEP] in the length, and ask for at least 1.",
    )


def _check_counts(run: Runner, call: _Call, sel: torch.Tensor, copies: int) -> None:
    """Rows of one-piece words come in ``copies`` identical copies: every copy gets the count."""
    counts = sel.sum(dim=1).tolist()
    for first in range(0, len(counts), copies):
        group = counts[first : first + copies]
        if len(set(group)) > 1:
            raise Mistake(
                "count_not_exact",
                "the number of targets varies between identical rows",
                f"On {call.text}, rows {first}..{first + copies - 1} are identical but got "
                f"between {min(group)} and {max(group)} targets. Google's recipe takes an exact "
                f"count per row, num_to_predict(length) = {call.budget(first)} here, not each "
                "word with probability `mlm_probability`.",
            )
        if group[0] != call.budget(first):
            raise _count_mistake(call, first, group[0])


def _case_counts(run: Runner) -> None:
    """Hidden case 2: one-piece words; lengths where round and int differ, and padding."""
    specs: list[RowSpec] = [
        (((1,) * 10,), 11),  # 12 real tokens: round(3.6) = 4, int gives 3; padded to 23: 7
        (((1,) * 12, (1,) * 8), 0),  # 23 tokens: round(6.9) = 7, int gives 6
        (((1,),), 20),  # 3 tokens: round(0.9) = 1, int gives 0
    ]
    copies = 20
    batch = make_batch([s for s in specs for _ in range(copies)])
    call = _Call(batch, "hidden case 2", mlm_probability=0.3)
    sel = call.run(run, gen(2))
    _check_structure(call, sel)
    _check_counts(run, call, sel, copies)
    run.ok(
        "the count is min(max_predictions_per_seq, max(1, round(length * p))), the length from "
        "`attention_mask`"
    )


def _check_budget(call: _Call, sel: torch.Tensor) -> None:
    """At most the count, and maximal: no unselected word fits in what is left."""
    rows = sel.tolist()
    for r, row_words in enumerate(call.batch.words):
        budget, taken = call.budget(r), sum(rows[r])
        chosen = [w for w in row_words if rows[r][w[0]]]
        where = f"On {call.text}, row {r} (count {budget})"
        if taken > budget:
            if len(chosen) <= budget:
                raise Mistake(
                    "counts_words",
                    "counts words, not pieces",
                    f"{where} got {len(chosen)} words = {taken} pieces. The count is in "
                    "*pieces* (tokens), because each piece is one prediction: add a word only if "
                    "`taken + len(word) <= count`, and add `len(word)` to `taken`.",
                )
            raise _count_mistake(call, r, taken)
        fits = [w for w in row_words if not rows[r][w[0]] and len(w) <= budget - taken]
        if fits:
            raise Mistake(
                "stops_at_first_long_word",
                "stops too early: a word that fits was left out",
                f"{where} got {taken} pieces, yet the {len(fits[0])}-piece word at position "
                f"{fits[0][0]} was not selected although {budget - taken} more would fit. A word "
                "that does not fit is *skipped* (`continue`), and the next words in the random "
                "order are still tried (`break` only when the count is reached).",
            )


def _case_budget(run: Runner, structure: _Call) -> None:
    """Hidden case 3: the budget with multi-piece words, then ``max_predictions_per_seq``."""
    sel = structure.run(run, gen(3))
    _check_budget(structure, sel)
    capped = _Call(
        make_batch([(((1, 2) * 10, (2, 1) * 5), 0)] * 4),
        "hidden case 3b",
        mlm_probability=0.3,
        max_predictions_per_seq=5,
    )
    sel = capped.run(run, gen(4))
    _check_structure(capped, sel)
    _check_budget(capped, sel)
    run.ok("never more pieces than the count; a word that fits is never left out")
    run.ok("`max_predictions_per_seq` caps the count")


def _stats_run(run: Runner, spec: RowSpec, p: float, label: str) -> tuple[_Call, torch.Tensor]:
    call = _Call(make_batch([spec] * 300), label, mlm_probability=p, attention=False)
    sel = call.run(run, gen(5))
    _check_structure(call, sel)
    _check_budget(call, sel)
    return call, sel


def _case_uniform(run: Runner) -> None:
    """Hidden case 4: words chosen in a uniformly random order."""
    call, sel = _stats_run(run, (((2,) * 6, (2,) * 6), 0), 0.23, "hidden case 4")  # count 6
    n = sel.shape[0]
    hits = [int(sel[:, w[0]].sum()) for w in call.batch.words[0]]
    share = (call.budget(0) // 2) / len(hits)
    if min(hits) == 0 or max(hits) == n or not all(within(h, n, share) for h in hits):
        never = [i for i, h in enumerate(hits) if h == 0]
        raise Mistake(
            "not_random_order",
            "words are not visited in a uniformly random order",
            f"On {call.text}, twelve 2-piece words and a count of {call.budget(0)}: each word "
            f"should be selected in about {share:.0%} of the {n} rows, but the words were "
            f"selected {hits} times"
            + (f" (words {never} never)" if never else "")
            + ". Shuffle the words (`torch.randperm(n_words, generator=generator)`) and visit "
            "them in that order.",
        )
    run.ok(f"every word is reachable and equally likely ({min(hits)}..{max(hits)} of {n} rows)")


def _case_length_bias(run: Runner) -> None:
    """Hidden case 5: a long word must come first in the order to fit."""
    call, sel = _stats_run(run, (((3, 1, 1, 1), (1, 1, 1)), 0), 0.27, "hidden case 5")  # count 3
    n, long_word = sel.shape[0], call.batch.words[0][0]
    hits = int(sel[:, long_word[0]].sum())
    if not within(hits, n, 1 / 7):
        raise Mistake(
            "weights_words_by_length",
            "long words are chosen too often (or too rarely)",
            f"On {call.text}, one 3-piece word, six 1-piece words and a count of 3: the 3-piece "
            f"word fits only if it comes first among the 7 words, so in about 1/7 = 14% of the "
            f"rows; it was selected in {hits} of {n} ({pct(hits, n)}). Drawing a random *piece* "
            "and taking its word favours long words (3/9 = 33%): shuffle the *words*, each "
            "equally likely.",
        )
    run.ok(f"a long word is not favoured ({pct(hits, n)} of the rows, expected 14%)")


def _check_generator(run: Runner, call: _Call) -> None:
    used = call.used_global
    if used is not None:
        raise Mistake(
            "uses_global_rng",
            "`generator` is not used for every random draw",
            f"On {call.text}, with a `generator` passed, your function still drew from the "
            f"global {used} generator. Pass `generator=generator` to every random call "
            "(`torch.randperm(n, generator=generator)`), so one seed gives one selection.",
        )
    check_seeds(
        run,
        lambda seed: call.run(run, None if seed is None else gen(seed)),
        torch.equal,
        not_deterministic=(
            "the same seed gave different results",
            f"On {call.text}, two calls with `generator=torch.Generator().manual_seed(0)` gave "
            "different selections. Every random draw must use `generator`.",
        ),
        ignores_generator=f"On {call.text}, generators seeded 0, 1 and 2 all gave the same "
        "selection. Use the `generator` you are given (not one made inside the function).",
    )


def _case_padding_and_zero(run: Runner) -> None:
    """Hidden case 6: padding marked only by ``attention_mask``; ``mlm_probability=0``."""
    rows: list[RowSpec] = [(((1, 2, 1), (2,)), 12), (((2, 1), (1,)), 14)]
    call = _Call(make_batch(rows, pad_is_special=False), "hidden case 6", mlm_probability=0.45)
    sel = call.run(run, gen(6))
    _check_structure(call, sel)
    _check_budget(call, sel)
    zero = _Call(make_batch(rows), "hidden case 7", mlm_probability=0.0)
    if bool(zero.run(run, gen(7)).any()):
        raise Mistake(
            "wrong_count_formula",
            "`mlm_probability=0` must select nothing",
            f"On {zero.text}, some positions were selected. With a probability of 0 the count is "
            "0 (Google's `max(1, ...)` applies only when something is asked for).",
        )
    run.ok("padding is excluded through `attention_mask`; `mlm_probability=0` selects nothing")


def check_select_whole_words(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    structure = _case_structure(run)
    _case_counts(run)
    _case_budget(run, structure)
    _case_uniform(run)
    _case_length_bias(run)
    _check_generator(run, structure)
    _case_padding_and_zero(run)
