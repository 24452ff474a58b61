"""Attempts at ``select_whole_words`` (lesson 01, section 7 exercise): Google's whole-word
selection. Words = a non-``##`` position plus the ``##`` pieces right after it; specials and
padding are in no word; each row's count is ``num_to_predict(length, p, max_pred)`` pieces
(``length`` = real length); words visited in a random order from ``generator``, each taken whole
if it still fits, skipped otherwise. The checker's diagnosis is statistical (properties of random
selections), so the mistakes are attempts here: most are the frame :func:`_select` with one part
swapped. ``battery/_structural.py`` writes the structural ones (edited input, torch's global
generator, a float result, the reference itself)."""

from __future__ import annotations

import math
import random
from typing import Any, NamedTuple

import torch

from battery._attempt import correct, wrong
from lmlessons.masking_variants import num_to_predict, word_ids


class _Call(NamedTuple):
    """The keyword arguments of one call, with the exercise's defaults."""

    attention_mask: Any = None
    mlm_probability: float = 0.15
    max_predictions_per_seq: int | None = 20
    generator: torch.Generator | None = None


def _eligible(special_tokens_mask, attention_mask):
    eligible = ~special_tokens_mask.bool()  # (B, T)
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


def _fill(words, count, order):
    """Google's loop: visit ``order``, take a word whole if it still fits, skip it otherwise."""
    chosen, taken = [], 0
    for w in order:
        if taken >= count:
            break
        if taken + len(words[w]) > count:
            continue
        chosen.extend(words[w])
        taken += len(words[w])
    return chosen


def _count(call, length, _n_eligible):
    """Google's count of the row's real length."""
    return num_to_predict(length, call.mlm_probability, call.max_predictions_per_seq)


def _shuffled(call, words):
    """The words in a random order from ``generator``."""
    return torch.randperm(len(words), generator=call.generator).tolist()


def _formula(targets):
    """A count part: ``targets(length, p)`` pieces, at most ``max_predictions_per_seq``."""

    def count(call, length, _n_eligible):
        n, cap = targets(length, call.mlm_probability), call.max_predictions_per_seq
        return n if cap is None else min(cap, n)

    return count


def _select(special_tokens_mask, is_continuation, kw, **parts):
    """The common frame: per row, its words, its count, an order, then the loop that takes
    words. ``kw``: the call's keyword arguments; ``parts``: ``words_of(eligible_row, cont_row)``,
    ``count(call, length, n_eligible)``, ``order(call, words)``, ``fill(words, count, order)``
    instead of the right ones."""
    call = _Call(**kw)
    words_of, fill = parts.get("words_of", _words), parts.get("fill", _fill)
    count_of, order_of = parts.get("count", _count), parts.get("order", _shuffled)
    eligible = _eligible(special_tokens_mask, call.attention_mask)  # (B, T)
    cont = is_continuation.bool()  # (B, T)
    selected = torch.zeros(special_tokens_mask.shape, dtype=torch.bool)  # (B, T)
    for row, length in enumerate(_lengths(special_tokens_mask, call.attention_mask)):
        words = words_of(eligible[row], cont[row])
        count = count_of(call, length, int(eligible[row].sum()))
        if not words or count == 0:
            continue
        selected[row, fill(words, count, order_of(call, words))] = True
    return selected


# ----------------------------------------------------------- wrong attempts: how words are grouped


@wrong("splits_words")
def random_pieces(special_tokens_mask, is_continuation, **kw):
    """Selects a random set of pieces (the exact-count recipe), ignoring word boundaries."""

    def pieces(eligible_row, _cont_row):
        return [[t] for t in eligible_row.nonzero().flatten().tolist()]

    return _select(special_tokens_mask, is_continuation, kw, words_of=pieces)


@wrong("masks_special_tokens")
def specials_eligible(special_tokens_mask, is_continuation, **kw):
    """Ignores special_tokens_mask: [CLS]/[SEP] become words."""
    none_special = torch.zeros_like(special_tokens_mask)
    return _select(none_special, is_continuation, kw)


@wrong("selects_padding")
def padding_eligible(special_tokens_mask, is_continuation, **kw):
    """Uses attention_mask for the length only: padding positions can be selected."""
    lengths = iter(_lengths(special_tokens_mask, kw.get("attention_mask")))

    def count(call, _length, _n):
        return num_to_predict(next(lengths), call.mlm_probability, call.max_predictions_per_seq)

    no_mask = {**kw, "attention_mask": None}
    return _select(special_tokens_mask, is_continuation, no_mask, count=count)


@wrong("orphan_piece")
def joins_across_specials(special_tokens_mask, is_continuation, **kw):
    """Word ids from a cumsum over the whole row: a ## piece right after [SEP] joins the word before
    the [SEP] (one 'word' on both sides)."""

    def words_of(eligible_row, cont_row):
        wid = (eligible_row & ~cont_row).long().cumsum(0).tolist()  # (T,)
        groups = {}
        for t, ok in enumerate(eligible_row.tolist()):
            if ok:
                groups.setdefault(wid[t], []).append(t)
        return list(groups.values())

    return _select(special_tokens_mask, is_continuation, kw, words_of=words_of)


@wrong("orphan_piece")
def orphans_never_selected(special_tokens_mask, is_continuation, **kw):
    """Never selects a ## piece right after [CLS]/[SEP] (the statement read literally; ambiguous,
    but the lesson's word_ids makes it a word of its own)."""

    def words_of(eligible_row, cont_row):
        return [w for w in _words(eligible_row, cont_row) if not bool(cont_row[w[0]])]

    return _select(special_tokens_mask, is_continuation, kw, words_of=words_of)


# ----------------------------------------------------------------------- wrong attempts: the count


@wrong("ignores_max_predictions")
def no_cap(special_tokens_mask, is_continuation, **kw):
    """Computes the count without max_predictions_per_seq."""
    return _select(special_tokens_mask, is_continuation, {**kw, "max_predictions_per_seq": None})


@wrong("count_from_padded_length")
def padded_length(special_tokens_mask, is_continuation, **kw):
    """Uses T (the padded length) for the count instead of the row's real length."""
    T = special_tokens_mask.shape[1]
    return _select(special_tokens_mask, is_continuation, kw, count=lambda c, _l, n: _count(c, T, n))


@wrong("wrong_count_formula")
def eligible_count(special_tokens_mask, is_continuation, **kw):
    """Uses the number of word pieces (without [CLS]/[SEP]) as the length."""
    return _select(special_tokens_mask, is_continuation, kw, count=lambda c, _l, n: _count(c, n, n))


@wrong("wrong_count_formula")
def ceil_count(special_tokens_mask, is_continuation, **kw):
    """Count = ceil(length * p) instead of round."""
    count = _formula(lambda length, p: math.ceil(length * p))
    return _select(special_tokens_mask, is_continuation, kw, count=count)


@wrong("wrong_count_formula")
def round_half_up(special_tokens_mask, is_continuation, **kw):
    """Rounds half up (int(x + 0.5)) where num_to_predict rounds half to even: one target more at
    exact ties such as 4.5."""
    # int(x + 0.5) where Python's round is half to even
    count = _formula(lambda n, p: 0 if p == 0 or n == 0 else max(1, int(n * p + 0.5)))
    return _select(special_tokens_mask, is_continuation, kw, count=count)


@wrong("wrong_count_formula")
def google_formula_at_zero(special_tokens_mask, is_continuation, **kw):
    """Writes Google's max(1, round(len*p)) itself: one target at mlm_probability=0, where
    num_to_predict (as asked) gives 0."""
    count = _formula(lambda n, p: max(1, round(n * p)))  # Google's: 1 target even at p = 0
    return _select(special_tokens_mask, is_continuation, kw, count=count)


@wrong("attention_mask_none")
def crashes_without_attention_mask(special_tokens_mask, is_continuation, **kw):
    """Calls attention_mask.sum() without a None check (the default)."""
    attention_mask = kw.get("attention_mask")
    lengths = attention_mask.sum(dim=1).tolist()  # AttributeError when attention_mask is None
    counts = iter([_count(_Call(**kw), n, n) for n in lengths])
    return _select(special_tokens_mask, is_continuation, kw, count=lambda *_: next(counts))


@wrong("count_not_exact")
def bernoulli_words(special_tokens_mask, is_continuation, **kw):
    """Each whole word with probability mlm_probability: words stay whole, the count varies."""
    call = _Call(**kw)
    eligible = _eligible(special_tokens_mask, call.attention_mask)  # (B, T)
    selected = torch.zeros(special_tokens_mask.shape, dtype=torch.bool)  # (B, T)
    for row in range(selected.shape[0]):
        words = _words(eligible[row], is_continuation[row].bool())
        draws = torch.rand(len(words), generator=call.generator) < call.mlm_probability
        for word, chosen in zip(words, draws.tolist()):
            selected[row, word] = chosen
    return selected


# ---------------------------------------------------------- wrong attempts: the order and the loop


@wrong("not_random_order")
def left_to_right(special_tokens_mask, is_continuation, **kw):
    """Visits the words left to right, not in a random order."""

    def in_place(_call, words):
        return list(range(len(words)))

    return _select(special_tokens_mask, is_continuation, kw, order=in_place)


@wrong("weights_words_by_length")
def picks_random_tokens(special_tokens_mask, is_continuation, **kw):
    """Orders words by their first piece in a random permutation of pieces: long words come first
    more often."""

    def by_piece(call, words):
        owner = [w for w, pieces in enumerate(words) for _ in pieces]  # the word of each piece
        perm = torch.randperm(len(owner), generator=call.generator).tolist()
        return list(dict.fromkeys(owner[k] for k in perm))

    return _select(special_tokens_mask, is_continuation, kw, order=by_piece)


@wrong("uses_global_rng")
def python_shuffle(special_tokens_mask, is_continuation, **kw):
    """random.shuffle (Python's global generator) for the word order."""

    def order(_call, words):
        out = list(range(len(words)))
        random.shuffle(out)  # Python's global generator
        return out

    return _select(special_tokens_mask, is_continuation, kw, order=order)


@wrong("stops_at_first_long_word")
def stops_at_long_word(special_tokens_mask, is_continuation, **kw):
    """Stops at the first word that does not fit instead of skipping it."""

    def fill(words, count, order):
        chosen = []
        for w in order:
            if len(chosen) + len(words[w]) > count:
                break  # should skip this word and try the next
            chosen.extend(words[w])
        return chosen

    return _select(special_tokens_mask, is_continuation, kw, fill=fill)


@wrong("counts_words")
def budget_in_words(special_tokens_mask, is_continuation, **kw):
    """Takes `count` words, not `count` pieces."""

    def fill(words, count, order):
        return [t for w in order[:count] for t in words[w]]  # `count` words, not pieces

    return _select(special_tokens_mask, is_continuation, kw, fill=fill)


@wrong("overshoots_count")
def overshoots(special_tokens_mask, is_continuation, **kw):
    """Takes a word whenever the count is not yet reached, even if it overshoots."""

    def fill(words, count, order):
        chosen = []
        for w in order:
            if len(chosen) < count:  # takes the word even if it does not fit
                chosen.extend(words[w])
        return chosen

    return _select(special_tokens_mask, is_continuation, kw, fill=fill)


@wrong("delegates_to_course", says="lmlessons.masking_variants.select_whole_words")
def the_course_select_whole_words(special_tokens_mask, is_continuation, **kwargs):
    """Calls the course's own select_whole_words: nothing written."""
    from lmlessons.masking_variants import select_whole_words

    return select_whole_words(special_tokens_mask, is_continuation, **kwargs)


# -------------------------------------------------------------------------------- correct attempts


@correct
def random_keys(special_tokens_mask, is_continuation, **kw):
    """A random key per word, words visited in key order."""

    def order(call, words):
        return torch.rand(len(words), generator=call.generator).argsort().tolist()

    return _select(special_tokens_mask, is_continuation, kw, order=order)


@correct
def multinomial_order(special_tokens_mask, is_continuation, **kw):
    """torch.multinomial without replacement for the order, no early break."""

    def order(call, words):
        n = len(words)
        return torch.multinomial(torch.ones(n), n, replacement=False, generator=call.generator)

    def fill(words, count, order_):
        chosen = []
        for w in order_.tolist():
            if len(chosen) + len(words[w]) <= count:
                chosen.extend(words[w])
        return chosen

    return _select(special_tokens_mask, is_continuation, kw, order=order, fill=fill)


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
    special = special_tokens_mask.bool().clone()  # (B, T)
    if attention_mask is not None:
        special |= ~attention_mask.bool()
    wids = word_ids(is_continuation.bool(), special)  # (B, T), -1 off words
    lengths = _lengths(special_tokens_mask, attention_mask)
    selected = torch.zeros(special.shape, dtype=torch.bool)  # (B, T)
    for row in range(special.shape[0]):
        count = num_to_predict(lengths[row], mlm_probability, max_predictions_per_seq)
        n_words = int(wids[row].max()) + 1
        taken = 0
        for w in torch.randperm(max(n_words, 0), generator=generator).tolist():
            piece = wids[row] == w  # (T,)
            size = int(piece.sum())
            if taken + size <= count:
                selected[row] |= piece
                taken += size
    return selected
