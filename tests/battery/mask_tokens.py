"""Attempts at ``mask_tokens`` (lesson 01, section 8): select each eligible position with
probability ``mlm_probability``; labels = original id there, -100 elsewhere; 80/10/10 on the
selected; ``input_ids`` untouched; every random number from ``generator``.

Most wrong attempts are one change to :func:`_bert` (a learner's threshold version: a uniform
draw per position for the selection, a second for the replacement): they take ``**kwargs``,
the exercise's keyword arguments, and pass them on with one of them changed or one step
(``select``, ``split``, ``random_ids``) swapped. The structural mistakes (an edited input, a
global draw, a float or list result, the reference itself) are ``battery/_structural.py``'s."""

from __future__ import annotations

import random

import torch
from transformers import DataCollatorForLanguageModeling  # imported once, not inside a check

from battery._attempt import correct, wrong


def _eligible(input_ids, special_tokens_mask):
    """True where a position may be selected (the mask may hold 0/1 integers)."""
    if special_tokens_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    return ~special_tokens_mask.bool()


def _select(input_ids, special_tokens_mask, p, generator):
    """Each eligible position with probability ``p`` (one uniform draw per position)."""
    drawn = torch.rand(input_ids.shape, generator=generator) < p  # (B, T)
    return drawn & _eligible(input_ids, special_tokens_mask)


def _split(u, pm, pr, generator):
    """``(to [MASK], to a random id)`` from the second draw ``u``: thresholds pm and pm + pr."""
    return u < pm, (u >= pm) & (u < pm + pr)


def _uniform_ids(n, input_ids, vocab_size, generator):
    """``n`` random ids, uniform in ``[0, vocab_size)``."""
    return torch.randint(vocab_size, (n,), generator=generator, dtype=input_ids.dtype)


def _replace(input_ids, selected, u, *, mask_token_id, vocab_size, generator, **steps):
    """The 80/10/10 step on a copy of ``input_ids``, from a second uniform draw ``u``; ``steps``:
    the two probabilities and the ``split`` and ``random_ids`` functions, if not the defaults."""
    pm, pr = steps.get("mask_replace_prob", 0.8), steps.get("random_replace_prob", 0.1)
    to_mask, to_random = steps.get("split", _split)(u, pm, pr, generator)  # (B, T) each
    masked = input_ids.masked_fill(selected & to_mask, mask_token_id)
    to_random &= selected
    draw = steps.get("random_ids", _uniform_ids)
    masked[to_random] = draw(int(to_random.sum()), input_ids, vocab_size, generator)
    return masked


def _bert(input_ids, *, special_tokens_mask=None, mlm_probability=0.15, generator=None, **rest):
    """``(selected, masked)``: ``rest["select"]`` (default :func:`_select`) picks the
    positions, then :func:`_replace` with a second draw and the rest of the arguments."""
    select = rest.pop("select", _select)
    selected = select(input_ids, special_tokens_mask, mlm_probability, generator)  # (B, T)
    u = torch.rand(input_ids.shape, generator=generator)  # (B, T)
    return selected, _replace(input_ids, selected, u, generator=generator, **rest)


def _labelled(input_ids, **kwargs):
    """:func:`_bert` with its labels: the original id where selected, -100 elsewhere."""
    selected, masked = _bert(input_ids, **kwargs)
    return masked, torch.where(selected, input_ids, -100)


# ------------------------------------------------- wrong attempts: one argument ignored or replaced


@wrong("masks_special_tokens")
def forgets_specials(input_ids, **kwargs):
    """Never looks at special_tokens_mask, so [CLS]/[SEP]/[PAD] get selected."""
    return _labelled(input_ids, **kwargs | {"special_tokens_mask": None})


@wrong("uses_global_rng")
def global_rng(input_ids, **kwargs):
    """Draws every random number from torch's global generator, not generator=."""
    return _labelled(input_ids, **kwargs | {"generator": None})


@wrong("ignores_generator")
def own_seeded_generator(input_ids, **kwargs):
    """Builds its own torch.Generator seeded with 0 and never uses the caller's generator."""
    g = torch.Generator().manual_seed(0)  # "reproducible", but the caller's generator is unused
    return _labelled(input_ids, **kwargs | {"generator": g})


@wrong("ignores_replace_probs")
def bert_shares_hard_coded(input_ids, **kwargs):
    """Uses 0.8/0.1 whatever mask_replace_prob and random_replace_prob say."""
    return _labelled(input_ids, **kwargs | {"mask_replace_prob": 0.8, "random_replace_prob": 0.1})


@wrong("ignores_mlm_probability")
def bert_rate_hard_coded(input_ids, **kwargs):
    """Selects with 0.15 whatever mlm_probability says."""
    return _labelled(input_ids, **kwargs | {"mlm_probability": 0.15})


@wrong("hard_coded_special_ids")
def never_selects_id_zero(input_ids, **kwargs):
    """Treats token id 0 as padding (hard-coded): a real token with id 0 is never selected."""
    special = ~_eligible(input_ids, kwargs.get("special_tokens_mask"))
    special |= input_ids == 0  # "0 is [PAD]": a hard-coded id, and id 0 may be a real token
    return _labelled(input_ids, **kwargs | {"special_tokens_mask": special})


# --------------------------------------------------------- wrong attempts: the labels or the result


@wrong("labels_not_ignored")
def labels_everywhere(input_ids, **kwargs):
    """Labels are a copy of input_ids: -100 is never written at the unselected positions."""
    _, masked = _bert(input_ids, **kwargs)
    return masked, input_ids.clone()  # forgot labels[~selected] = -100


@wrong("labels_not_ignored")
def zero_labels_elsewhere(input_ids, **kwargs):
    """Labels = input_ids * selected: 0, a real token id, where nothing is to be predicted."""
    selected, masked = _bert(input_ids, **kwargs)
    return masked, input_ids * selected


@wrong("labels_are_corrupted_ids")
def labels_from_masked(input_ids, **kwargs):
    """Labels hold the corrupted ids ([MASK]/random) instead of the original ones."""
    selected, masked = _bert(input_ids, **kwargs)
    return masked, torch.where(selected, masked, -100)  # the corrupted ids, not the originals


@wrong("labels_are_boolean_mask")
def labels_are_selection(input_ids, **kwargs):
    """Returns the boolean selection as labels instead of ids and -100."""
    selected, masked = _bert(input_ids, **kwargs)
    return masked, selected  # the boolean mask of targets, not the ids


@wrong("swapped_outputs")
def swapped_outputs(input_ids, **kwargs):
    """Returns (labels, masked_input_ids) instead of (masked_input_ids, labels)."""
    masked, labels = _labelled(input_ids, **kwargs)
    return labels, masked


@wrong("wrong_shape")
def flattened_output(input_ids, *, special_tokens_mask=None, **kwargs):
    """Works on input_ids.reshape(-1) and returns (B*T,) tensors."""
    special = None if special_tokens_mask is None else special_tokens_mask.reshape(-1)
    return _labelled(input_ids.reshape(-1), special_tokens_mask=special, **kwargs)  # (B*T,)


@wrong("wrong_type")
def returns_the_inputs_only(input_ids, **kwargs):
    """Returns the corrupted input_ids alone, not the pair (input_ids, labels)."""
    return _labelled(input_ids, **kwargs)[0]


# -------------------------------------------------------------------- wrong attempts: the selection


@wrong("masks_special_tokens")
def hard_coded_bert_specials(input_ids, **kwargs):
    """Excludes BERT's [PAD]=0, [CLS]=101, [SEP]=102 by value instead of using the mask."""

    def bert_ids_excluded(input_ids, special_tokens_mask, p, generator):
        by_value = (input_ids == 0) | (input_ids == 101) | (input_ids == 102)
        return (torch.rand(input_ids.shape, generator=generator) < p) & ~by_value

    return _labelled(input_ids, select=bert_ids_excluded, **kwargs)


@wrong("masks_special_tokens")
def special_mask_as_index(input_ids, **kwargs):
    """Indexes with special_tokens_mask as given: right for a bool mask, but a 0/1 integer mask
    picks rows 0 and 1, so specials get selected."""

    def mask_as_index(input_ids, special_tokens_mask, p, generator):
        selected = torch.rand(input_ids.shape, generator=generator) < p
        if special_tokens_mask is not None:
            selected[special_tokens_mask] = False  # right for a bool mask only
        return selected

    return _labelled(input_ids, select=mask_as_index, **kwargs)


@wrong("special_tokens_mask_none")
def crashes_without_special_mask(input_ids, **kwargs):
    """Calls special_tokens_mask.bool() without checking for None, so the default
    special_tokens_mask=None crashes."""

    def unchecked_mask(input_ids, special_tokens_mask, p, generator):
        selected = torch.rand(input_ids.shape, generator=generator) < p
        return selected & ~special_tokens_mask.bool()  # AttributeError when it is None

    return _labelled(input_ids, select=unchecked_mask, **kwargs)


@wrong("selects_exact_count")
def floor_count_per_row(input_ids, **kwargs):
    """Selects exactly int(p * eligible) positions per row (rounded down, never varying) instead of
    each position with probability p: the rate is low on short rows."""

    def floor_count(input_ids, special_tokens_mask, p, generator):
        eligible = _eligible(input_ids, special_tokens_mask).reshape(-1, input_ids.shape[-1])
        selected = torch.zeros_like(eligible)
        for row in range(eligible.shape[0]):
            pos = eligible[row].nonzero().squeeze(1)
            k = int(p * len(pos))  # a fixed count per row, rounded down
            selected[row, pos[torch.randperm(len(pos), generator=generator)[:k]]] = True
        return selected.reshape(input_ids.shape)

    return _labelled(input_ids, select=floor_count, **kwargs)


@wrong("int_mask_not_bool")
def tilde_on_long_mask(
    input_ids, *, special_tokens_mask=None, mlm_probability=0.15, generator=None, **unused
):
    """``~special_tokens_mask`` on a 0/1 long tensor (bitwise not: -1 and -2, both true)."""
    probs = torch.full(input_ids.shape, mlm_probability)
    probs = probs.masked_fill(~special_tokens_mask, 0.0)  # ~ on a 0/1 long tensor, not a bool one
    selected = torch.bernoulli(probs, generator=generator).bool()
    return input_ids.clone(), torch.where(selected, input_ids, -100)


@wrong("replacement_rates_off")
def reuses_draw_unscaled(
    input_ids, *, special_tokens_mask=None, mlm_probability=0.15, generator=None, **kwargs
):
    """Reuses the selection draw u for 80/10/10 without dividing by p: at p=0.15 every selected
    position becomes [MASK]."""
    u = torch.rand(input_ids.shape, generator=generator)
    selected = (u < mlm_probability) & _eligible(input_ids, special_tokens_mask)
    # u < p already, so u < 0.8 is (nearly) always true: u should be divided by p first
    masked = _replace(input_ids, selected, u, generator=generator, **kwargs)
    return masked, torch.where(selected, input_ids, -100)


# ------------------------------------------------------------------ wrong attempts: the replacement


@wrong("random_not_conditional")
def random_share_unscaled(input_ids, **kwargs):
    """Draws 'random' with probability random_replace_prob among the non-[MASK] selected (should be
    0.1/0.2): ~2% random, ~18% kept."""

    def unscaled(u, pm, pr, generator):
        # the random draw is conditional on "not [MASK]": it should be pr / (1 - pm), not pr
        return u < pm, (u >= pm) & (torch.rand(u.shape, generator=generator) < pr)

    return _labelled(input_ids, split=unscaled, **kwargs)


@wrong("divides_by_zero")
def unguarded_division(input_ids, **kwargs):
    """Scales the random share by random_replace_prob / (1 - mask_replace_prob) without a guard:
    ZeroDivisionError at mask_replace_prob = 1."""

    def unguarded(u, pm, pr, generator):
        scaled = pr / (1 - pm)  # ZeroDivisionError at mask_replace_prob = 1
        return u < pm, (u >= pm) & (torch.rand(u.shape, generator=generator) < scaled)

    return _labelled(input_ids, split=unguarded, **kwargs)


@wrong("random_ids_out_of_range")
def random_ids_from_one(input_ids, **kwargs):
    """Random replacement ids drawn from [1, vocab_size], so vocab_size itself can appear."""

    def from_one(n, input_ids, vocab_size, generator):
        return torch.randint(1, vocab_size + 1, (n,), generator=generator)  # 1..V

    return _labelled(input_ids, random_ids=from_one, **kwargs)


@wrong("uses_global_rng")
def python_random_replacement(input_ids, **kwargs):
    """Draws the random replacement ids with Python's random.randrange (global generator), the rest
    from generator=."""

    def python_ids(n, input_ids, vocab_size, generator):
        return torch.tensor([random.randrange(vocab_size) for _ in range(n)], dtype=input_ids.dtype)

    return _labelled(input_ids, random_ids=python_ids, **kwargs)


@wrong("random_ids_not_uniform")
def random_from_batch(input_ids, **kwargs):
    """Random replacements are tokens copied from the batch itself (its unigram distribution), not
    ids uniform in [0, vocab_size)."""

    def batch_tokens(n, input_ids, vocab_size, generator):
        flat = input_ids.reshape(-1)
        picks = torch.randint(flat.numel(), (n,), generator=generator)
        return flat[picks]  # the batch's own tokens, not ids uniform over the vocabulary

    return _labelled(input_ids, random_ids=batch_tokens, **kwargs)


@wrong("fails_when_nothing_selected")
def stacks_random_ids(input_ids, **kwargs):
    """Builds the random ids with torch.stack of a list: raises when no position gets a random id
    (mlm_probability=0, random_replace_prob=0)."""

    def stacked_ids(n, input_ids, vocab_size, generator):
        return torch.stack([torch.randint(vocab_size, (), generator=generator) for _ in range(n)])

    return _labelled(input_ids, random_ids=stacked_ids, **kwargs)


# --------------------------------------------------------- wrong attempts: transformers, the course


class _StubTokenizer:
    """Just what DataCollatorForLanguageModeling reads from a tokenizer."""

    mask_token = "[MASK]"

    def __init__(self, mask_token_id, vocab_size):
        self._mask_id, self._size = mask_token_id, vocab_size

    def __len__(self):
        return self._size

    def convert_tokens_to_ids(self, token):
        return self._mask_id


def _collator(inputs, *, mask_token_id, vocab_size, special_tokens_mask=None, generator=None, **p):
    """``DataCollatorForLanguageModeling.torch_mask_tokens`` on ``inputs`` (it writes into
    them), with the probabilities ``p`` and the caller's generator."""
    collator = DataCollatorForLanguageModeling(_StubTokenizer(mask_token_id, vocab_size), **p)
    collator.generator = generator
    special = special_tokens_mask
    if special is None:
        special = torch.zeros_like(inputs, dtype=torch.bool)
    return collator.torch_mask_tokens(inputs, special_tokens_mask=special)


@wrong("modifies_input")
def collator_on_the_input(input_ids, **kwargs):
    """transformers' torch_mask_tokens on the caller's input_ids as is: it writes [MASK] and
    random ids into them (and returns them)."""
    return _collator(input_ids, **kwargs)


@wrong("delegates_to_course", says="lmlessons.masking.mask_tokens")
def the_course_mask_tokens(input_ids, **kwargs):
    """Calls the course's own mask_tokens (the lesson's setup imports it): nothing written."""
    import lmlessons

    return lmlessons.mask_tokens(input_ids, **kwargs)


# --------------------------------------------------------------------------------- correct attempts


@correct
def via_transformers_collator(input_ids, **kwargs):
    """DataCollatorForLanguageModeling.torch_mask_tokens itself, on a clone, with the caller's
    generator."""
    return _collator(input_ids.clone(), **kwargs)


@correct
def thresholds_on_two_draws(input_ids, **kwargs):
    """One uniform draw for the selection, a second against mask_replace_prob and
    mask_replace_prob + random_replace_prob (the helper every wrong attempt above changes)."""
    return _labelled(input_ids, **kwargs)


@correct
def three_bernoullis(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """transformers' three Bernoulli draws, on a clone, with generator=."""
    inputs = input_ids.clone()
    labels = input_ids.clone()
    prob = torch.full(labels.shape, float(mlm_probability))
    if special_tokens_mask is not None:
        prob.masked_fill_(special_tokens_mask.bool(), 0.0)
    selected = torch.bernoulli(prob, generator=generator).bool()
    labels[~selected] = -100
    replaced = torch.full(labels.shape, float(mask_replace_prob))
    replaced = torch.bernoulli(replaced, generator=generator).bool() & selected
    inputs[replaced] = mask_token_id
    remaining = 1.0 - mask_replace_prob
    if remaining <= 0 or random_replace_prob == 0:
        return inputs, labels
    scaled = min(1.0, random_replace_prob / remaining)
    rnd = torch.bernoulli(torch.full(labels.shape, scaled), generator=generator).bool()
    rnd &= selected & ~replaced
    words = torch.randint(vocab_size, labels.shape, dtype=input_ids.dtype, generator=generator)
    inputs[rnd] = words[rnd]
    return inputs, labels


@correct
def one_categorical_draw(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """One torch.multinomial draw per position over skip/[MASK]/random/keep."""
    p = float(mlm_probability)
    keep = max(0.0, 1.0 - mask_replace_prob - random_replace_prob)
    probs = torch.tensor(
        [1.0 - p, p * mask_replace_prob, p * random_replace_prob, p * keep], dtype=torch.float64
    )
    n = input_ids.numel()
    kind = torch.multinomial(probs, n, replacement=True, generator=generator)
    kind = kind.reshape(input_ids.shape)
    kind = kind.masked_fill(~_eligible(input_ids, special_tokens_mask), 0)
    labels = torch.where(kind > 0, input_ids, torch.full_like(input_ids, -100))
    random_ids = torch.randint(
        vocab_size, input_ids.shape, generator=generator, dtype=input_ids.dtype
    )
    masked = torch.where(kind == 1, torch.full_like(input_ids, mask_token_id), input_ids)
    masked = torch.where(kind == 2, random_ids, masked)
    return masked, labels


@correct
def scaled_thresholds_loop(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """One uniform per position against p*pm and p*(pm+pr), row by row."""
    p = mlm_probability
    masked = input_ids.clone()
    labels = torch.full_like(input_ids, -100)
    eligible = _eligible(input_ids, special_tokens_mask)
    for row in range(input_ids.shape[0]):
        u = torch.rand(input_ids.shape[1:], generator=generator)
        sel = (u < p) & eligible[row]
        labels[row][sel] = input_ids[row][sel]
        masked[row][sel & (u < p * mask_replace_prob)] = mask_token_id
        rnd = (
            sel & (u >= p * mask_replace_prob) & (u < p * (mask_replace_prob + random_replace_prob))
        )
        n = int(rnd.sum())
        if n:
            masked[row][rnd] = torch.randint(
                vocab_size, (n,), generator=generator, dtype=input_ids.dtype
            )
    return masked, labels
