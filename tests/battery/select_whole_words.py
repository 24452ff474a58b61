"""Attempts at ``select_whole_words`` (lesson 01, section 7 exercise): Google's whole-word
selection. Words = a non-``##`` position plus the ``##`` pieces right after it; specials and
padding are in no word; each row's budget is ``num_to_predict(length, p, max_pred)`` pieces
(``length`` = real length); words visited in a random order from ``generator``, each taken whole
if it still fits, skipped otherwise."""

from __future__ import annotations

import math
import random

import torch

from battery._attempt import correct, wrong
from lmlessons.masking_variants import num_to_predict, word_ids


def _eligible(special_tokens_mask, attention_mask):
    eligible = ~special_tokens_mask.bool()
    if attention_mask is not None:
        eligible &= attention_mask.bool()
    return eligible


def _lengths(special_tokens_mask, attention_mask):
    B, T = special_tokens_mask.shape
    if attention_mask is None:
        return [T] * B
    return [int(n) for n in attention_mask.sum(dim=1)]


def _words(eligible_row, cont_row):
    """Positions of each word of one row: a ``##`` piece joins the word of the token before it
    when that token is in a word; otherwise it starts a word of its own."""
    words = []
    prev_in_word = False
    for t, (ok, cont) in enumerate(zip(eligible_row.tolist(), cont_row.tolist())):
        if not ok:
            prev_in_word = False
            continue
        if cont and prev_in_word:
            words[-1].append(t)
        else:
            words.append([t])
        prev_in_word = True
    return words


def _fill(words, budget, order):
    """Google's loop: visit ``order``, take a word whole if it still fits, skip it otherwise."""
    chosen, taken = [], 0
    for w in order:
        if taken >= budget:
            break
        if taken + len(words[w]) > budget:
            continue
        chosen.extend(words[w])
        taken += len(words[w])
    return chosen


def _select(
    special_tokens_mask,
    is_continuation,
    attention_mask,
    budget_of,
    order_of,
    words_of=_words,
    fill=_fill,
):
    """The common frame: per row, its words, its budget, an order, then ``fill``."""
    eligible = _eligible(special_tokens_mask, attention_mask)
    cont = is_continuation.bool()
    selected = torch.zeros(special_tokens_mask.shape, dtype=torch.bool)
    for row, length in enumerate(_lengths(special_tokens_mask, attention_mask)):
        words = words_of(eligible[row], cont[row])
        budget = budget_of(length, int(eligible[row].sum()))
        if not words or budget == 0:
            continue
        chosen = fill(words, budget, order_of(len(words)))
        selected[row, chosen] = True
    return selected


def _randperm(generator):
    return lambda n: torch.randperm(n, generator=generator).tolist()


def _budget(mlm_probability, max_predictions_per_seq):
    return lambda length, _n_eligible: num_to_predict(
        length, mlm_probability, max_predictions_per_seq
    )


# --------------------------------------------------------------------------------------------
# wrong attempts
# --------------------------------------------------------------------------------------------


@wrong("splits_words")
def random_pieces(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Selects a random set of pieces (the exact-count recipe), ignoring word boundaries."""

    def pieces(eligible_row, _cont_row):
        return [[t] for t in eligible_row.nonzero().flatten().tolist()]

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        words_of=pieces,
    )


@wrong("stops_at_first_long_word")
def stops_at_long_word(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Stops at the first word that does not fit instead of skipping it."""

    def fill(words, budget, order):
        chosen = []
        for w in order:
            if len(chosen) + len(words[w]) > budget:
                break  # should skip this word and try the next
            chosen.extend(words[w])
        return chosen

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        fill=fill,
    )


@wrong("ignores_max_predictions")
def no_cap(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Computes the count without max_predictions_per_seq."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, None),
        _randperm(generator),
    )


@wrong("count_from_padded_length")
def padded_length(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Uses T (the padded length) for the count instead of the row's real length."""
    T = special_tokens_mask.shape[1]
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        lambda _length, _n: num_to_predict(T, mlm_probability, max_predictions_per_seq),
        _randperm(generator),
    )


@wrong("selects_padding")
def padding_eligible(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Uses attention_mask for the length only: padding positions can be selected."""
    lengths = iter(_lengths(special_tokens_mask, attention_mask))
    return _select(
        special_tokens_mask,
        is_continuation,
        None,
        lambda _length, _n: num_to_predict(next(lengths), mlm_probability, max_predictions_per_seq),
        _randperm(generator),
    )


@wrong("masks_special_tokens")
def specials_eligible(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Ignores special_tokens_mask: [CLS]/[SEP] become words."""
    none_special = torch.zeros_like(special_tokens_mask)
    return _select(
        none_special,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
    )


@wrong("orphan_piece")
def joins_across_specials(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Word ids from a cumsum over the whole row: a ## piece right after [SEP] joins the word before
    the [SEP] (one 'word' on both sides)."""

    def words_of(eligible_row, cont_row):
        wid = (eligible_row & ~cont_row).long().cumsum(0).tolist()
        groups = {}
        for t, ok in enumerate(eligible_row.tolist()):
            if ok:
                groups.setdefault(wid[t], []).append(t)
        return list(groups.values())

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        words_of=words_of,
    )


@wrong("uses_global_rng")
def global_randperm(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """torch.randperm without generator= (global generator)."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        lambda n: torch.randperm(n).tolist(),
    )


@wrong("not_random_order")
def left_to_right(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Visits the words left to right, not in a random order."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        lambda n: list(range(n)),
    )


@wrong("weights_words_by_length")
def picks_random_tokens(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Orders words by their first piece in a random permutation of pieces: long words come first
    more often."""

    def fill(words, budget, _order):
        owner = {t: w for w, pos in enumerate(words) for t in pos}
        pieces = sorted(owner)
        order = []
        for k in torch.randperm(len(pieces), generator=generator).tolist():
            if owner[pieces[k]] not in order:
                order.append(owner[pieces[k]])
        return _fill(words, budget, order)

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        lambda n: None,
        fill=fill,
    )


@wrong("counts_words")
def budget_in_words(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Takes `count` words, not `count` pieces."""

    def fill(words, budget, order):
        return [t for w in order[:budget] for t in words[w]]  # `budget` words, not pieces

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        fill=fill,
    )


@wrong("wrong_count_formula")
def ceil_count(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Count = ceil(length * p) instead of round."""

    def budget(length, _n):
        n = math.ceil(length * mlm_probability)
        return n if max_predictions_per_seq is None else min(max_predictions_per_seq, n)

    return _select(
        special_tokens_mask, is_continuation, attention_mask, budget, _randperm(generator)
    )


@wrong("wrong_count_formula")
def round_half_up(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Rounds half up (int(x + 0.5)) where num_to_predict rounds half to even: one target more at
    exact ties such as 4.5."""

    def budget(length, _n):
        if mlm_probability == 0 or length == 0:
            return 0
        n = max(1, int(length * mlm_probability + 0.5))  # Python's round is half to even
        return n if max_predictions_per_seq is None else min(max_predictions_per_seq, n)

    return _select(
        special_tokens_mask, is_continuation, attention_mask, budget, _randperm(generator)
    )


@wrong("wrong_count_formula")
def google_formula_at_zero(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Writes Google's max(1, round(len*p)) itself: one target at mlm_probability=0, where
    num_to_predict (as asked) gives 0."""

    def budget(length, _n):
        n = max(1, round(length * mlm_probability))  # Google's formula: 1 target even at p = 0
        return n if max_predictions_per_seq is None else min(max_predictions_per_seq, n)

    return _select(
        special_tokens_mask, is_continuation, attention_mask, budget, _randperm(generator)
    )


@wrong("wrong_count_formula")
def eligible_count(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Uses the number of word pieces (without [CLS]/[SEP]) as the length."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        lambda _length, n_eligible: num_to_predict(
            n_eligible, mlm_probability, max_predictions_per_seq
        ),
        _randperm(generator),
    )


@wrong("overshoots_count")
def overshoots(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Takes a word whenever the count is not yet reached, even if it overshoots."""

    def fill(words, budget, order):
        chosen = []
        for w in order:
            if len(chosen) < budget:  # takes the word even if it does not fit
                chosen.extend(words[w])
        return chosen

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        fill=fill,
    )


@wrong("wrong_dtype")
def long_mask(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Returns a 0/1 long tensor instead of bool."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
    ).long()  # 0/1 integers, not bool


@wrong("attention_mask_none")
def crashes_without_attention_mask(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Calls attention_mask.sum() without a None check (the default)."""
    lengths = attention_mask.sum(dim=1).tolist()  # AttributeError when attention_mask is None
    budgets = iter([num_to_predict(n, mlm_probability, max_predictions_per_seq) for n in lengths])
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        lambda _length, _n: next(budgets),
        _randperm(generator),
    )


@wrong("modifies_input")
def marks_padding_special(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Folds padding into special_tokens_mask in place, changing the caller's tensor."""
    if attention_mask is not None:
        special_tokens_mask[attention_mask == 0] = 1  # writes into the caller's mask
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
    )


@wrong("uses_global_rng")
def python_shuffle(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """random.shuffle (Python's global generator) for the word order."""

    def order(n):
        out = list(range(n))
        random.shuffle(out)  # Python's global generator
        return out

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        order,
    )


@wrong("orphan_piece")
def orphans_never_selected(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Never selects a ## piece right after [CLS]/[SEP] (the statement read literally; ambiguous,
    but the lesson's word_ids makes it a word of its own)."""

    def words_of(eligible_row, cont_row):
        return [w for w in _words(eligible_row, cont_row) if not bool(cont_row[w[0]])]

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        _randperm(generator),
        words_of=words_of,
    )


# --------------------------------------------------------------------------------------------
# correct attempts
# --------------------------------------------------------------------------------------------


@correct
def random_keys(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """A random key per word, words visited in key order."""
    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        lambda n: torch.rand(n, generator=generator).argsort().tolist(),
    )


@correct
def with_package_word_ids(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """The lesson's word_ids helper, whole-tensor word masks."""
    special = special_tokens_mask.bool().clone()
    if attention_mask is not None:
        special |= ~attention_mask.bool()
    wids = word_ids(is_continuation.bool(), special)  # (B, T), -1 off words
    lengths = _lengths(special_tokens_mask, attention_mask)
    selected = torch.zeros(special.shape, dtype=torch.bool)
    for row in range(special.shape[0]):
        budget = num_to_predict(lengths[row], mlm_probability, max_predictions_per_seq)
        n_words = int(wids[row].max()) + 1
        taken = 0
        for w in torch.randperm(max(n_words, 0), generator=generator).tolist():
            piece = wids[row] == w
            size = int(piece.sum())
            if taken + size <= budget:
                selected[row] |= piece
                taken += size
    return selected


@correct
def multinomial_order(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """torch.multinomial without replacement for the order, no early break."""

    def order(n):
        return torch.multinomial(torch.ones(n), n, replacement=False, generator=generator).tolist()

    def fill(words, budget, order_):
        chosen = []
        for w in order_:
            if len(chosen) + len(words[w]) <= budget:
                chosen.extend(words[w])
        return chosen

    return _select(
        special_tokens_mask,
        is_continuation,
        attention_mask,
        _budget(mlm_probability, max_predictions_per_seq),
        order,
        fill=fill,
    )


# --------------------------------------------------------------------------------------------
# first drafts and other naive versions
# --------------------------------------------------------------------------------------------


@wrong("uses_global_rng")
def draft_as_written(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """A first draft: each eligible piece on its own with probability p, from the global
    generator, without a count."""
    eligible = ~special_tokens_mask.bool()
    return (torch.rand(special_tokens_mask.shape) < mlm_probability) & eligible


@wrong("count_not_exact")
def bernoulli_words(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Each whole word with probability mlm_probability: words stay whole, the count varies."""
    eligible = _eligible(special_tokens_mask, attention_mask)
    selected = torch.zeros(special_tokens_mask.shape, dtype=torch.bool)
    for row in range(selected.shape[0]):
        words = _words(eligible[row], is_continuation[row].bool())
        draws = torch.rand(len(words), generator=generator) < mlm_probability
        for word, chosen in zip(words, draws.tolist()):
            selected[row, word] = chosen
    return selected


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.masking_variants.select_whole_words")
def the_course_select_whole_words(special_tokens_mask, is_continuation, **kwargs):
    """Calls the course's own select_whole_words: nothing written."""
    from lmlessons.masking_variants import select_whole_words

    return select_whole_words(special_tokens_mask, is_continuation, **kwargs)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(special_tokens_mask, is_continuation, **kwargs):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions import select_whole_words

    return select_whole_words(special_tokens_mask, is_continuation, **kwargs)
