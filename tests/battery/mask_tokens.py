"""Attempts at ``mask_tokens`` (lesson 01, section 8): select each eligible position with
probability ``mlm_probability``; labels = original id there, -100 elsewhere; 80/10/10 on the
selected; ``input_ids`` untouched; every random number from ``generator``."""

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


def _replace(input_ids, selected, u, *, mask_token_id, vocab_size, pm, pr, generator):
    """The 80/10/10 step on a copy of ``input_ids``, from a second uniform draw ``u``."""
    masked = input_ids.clone()
    masked[selected & (u < pm)] = mask_token_id
    to_random = selected & (u >= pm) & (u < pm + pr)
    masked[to_random] = torch.randint(
        vocab_size, (int(to_random.sum()),), generator=generator, dtype=input_ids.dtype
    )
    return masked


def _common(input_ids, special_tokens_mask, p, generator):
    """Selection by one uniform draw per position, then a second draw for the replacement."""
    selected = torch.rand(input_ids.shape, generator=generator) < p
    selected &= _eligible(input_ids, special_tokens_mask)
    u = torch.rand(input_ids.shape, generator=generator)
    return selected, u


# --------------------------------------------------------------------------------------------
# wrong attempts
# --------------------------------------------------------------------------------------------


@wrong("masks_special_tokens")
def forgets_specials(
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
    """Never looks at special_tokens_mask, so [CLS]/[SEP]/[PAD] get selected."""
    selected = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    u = torch.rand(input_ids.shape, generator=generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("labels_not_ignored")
def labels_everywhere(
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
    """Labels are a copy of input_ids: -100 is never written at the unselected positions."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = input_ids.clone()  # forgot labels[~selected] = -100
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("labels_are_corrupted_ids")
def labels_from_masked(
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
    """Labels hold the corrupted ids ([MASK]/random) instead of the original ones."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    labels = torch.where(selected, masked, -100)  # the corrupted ids, not the originals
    return masked, labels


@wrong("labels_are_boolean_mask")
def labels_are_selection(
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
    """Returns the boolean selection as labels instead of ids and -100."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, selected  # the boolean mask of targets, not the ids


@wrong("modifies_input")
def copied_from_transformers(
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
    """transformers' torch_mask_tokens copied as is: it writes [MASK] and random ids into the
    caller's input_ids."""
    inputs = input_ids
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability)
    if special_tokens_mask is not None:
        probability_matrix.masked_fill_(special_tokens_mask.bool(), value=0.0)
    masked_indices = torch.bernoulli(probability_matrix, generator=generator).bool()
    labels[~masked_indices] = -100
    replaced = torch.bernoulli(torch.full(labels.shape, mask_replace_prob), generator=generator)
    replaced = replaced.bool() & masked_indices
    inputs[replaced] = mask_token_id
    if mask_replace_prob == 1 or random_replace_prob == 0:
        return inputs, labels
    scaled = random_replace_prob / (1 - mask_replace_prob)
    rnd = torch.bernoulli(torch.full(labels.shape, scaled), generator=generator).bool()
    rnd &= masked_indices & ~replaced
    words = torch.randint(vocab_size, labels.shape, dtype=torch.long, generator=generator)
    inputs[rnd] = words[rnd]
    return inputs, labels


@wrong("uses_global_rng")
def global_rng(
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
    """Draws every random number from torch's global generator, not generator=."""
    selected = torch.rand(input_ids.shape) < mlm_probability
    selected &= _eligible(input_ids, special_tokens_mask)
    u = torch.rand(input_ids.shape)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=None,
    )
    return masked, labels


@wrong("ignores_generator")
def own_seeded_generator(
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
    """Builds its own torch.Generator seeded with 0 and never uses the caller's generator."""
    g = torch.Generator().manual_seed(0)  # "reproducible", but the caller's generator is unused
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, g)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=g,
    )
    return masked, labels


@wrong("random_not_conditional")
def random_share_unscaled(
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
    """Draws 'random' with probability random_replace_prob among the non-[MASK] selected (should be
    0.1/0.2): ~2% random, ~18% kept."""
    selected, _ = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    to_mask = selected & (torch.rand(input_ids.shape, generator=generator) < mask_replace_prob)
    # the random draw should be conditional on "not [MASK]": 0.1 / 0.2, not 0.1
    to_random = selected & ~to_mask
    to_random &= torch.rand(input_ids.shape, generator=generator) < random_replace_prob
    masked = input_ids.masked_fill(to_mask, mask_token_id)
    masked[to_random] = torch.randint(vocab_size, (int(to_random.sum()),), generator=generator)
    return masked, labels


@wrong("random_ids_out_of_range")
def random_ids_from_one(
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
    """Random replacement ids drawn from [1, vocab_size], so vocab_size itself can appear."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = input_ids.masked_fill(selected & (u < mask_replace_prob), mask_token_id)
    to_random = selected & (u >= mask_replace_prob) & (u < mask_replace_prob + random_replace_prob)
    n = int(to_random.sum())
    masked[to_random] = torch.randint(1, vocab_size + 1, (n,), generator=generator)  # 1..V
    return masked, labels


@wrong("hard_coded_special_ids")
def never_selects_id_zero(
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
    """Treats token id 0 as padding (hard-coded): a real token with id 0 is never selected."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    selected &= input_ids != 0  # "0 is [PAD]": a hard-coded id, and id 0 may be a real token
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("ignores_replace_probs")
def bert_shares_hard_coded(
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
    """Uses 0.8/0.1 whatever mask_replace_prob and random_replace_prob say."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=0.8,
        pr=0.1,
        generator=generator,
    )
    return masked, labels


@wrong("ignores_mlm_probability")
def bert_rate_hard_coded(
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
    """Selects with 0.15 whatever mlm_probability says."""
    selected, u = _common(input_ids, special_tokens_mask, 0.15, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("special_tokens_mask_none")
def crashes_without_special_mask(
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
    """Calls special_tokens_mask.bool() without checking for None, so the default
    special_tokens_mask=None crashes."""
    selected = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    selected &= ~special_tokens_mask.bool()  # AttributeError when it is None
    u = torch.rand(input_ids.shape, generator=generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("masks_special_tokens")
def special_mask_as_index(
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
    """Indexes with special_tokens_mask as given: right for a bool mask, but a 0/1 integer mask
    picks rows 0 and 1, so specials get selected."""
    selected = torch.rand(input_ids.shape, generator=generator) < mlm_probability
    if special_tokens_mask is not None:
        # right for a bool mask; a 0/1 integer mask indexes rows 0 and 1 instead
        selected[special_tokens_mask] = False
    u = torch.rand(input_ids.shape, generator=generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("replacement_rates_off")
def reuses_draw_unscaled(
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
    """Reuses the selection draw u for 80/10/10 without dividing by p: at p=0.15 every selected
    position becomes [MASK]."""
    u = torch.rand(input_ids.shape, generator=generator)
    selected = (u < mlm_probability) & _eligible(input_ids, special_tokens_mask)
    labels = torch.where(selected, input_ids, -100)
    # u < p already, so u < 0.8 is (nearly) always true: u should be divided by p first
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("wrong_dtype")
def float_labels(
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
    """torch.where(selected, input_ids, -100.0): the float scalar makes labels float32."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100.0)  # a float scalar makes labels float32
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("wrong_shape")
def flattened_output(
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
    """Works on input_ids.reshape(-1) and returns (B*T,) tensors."""
    flat = input_ids.reshape(-1)
    special = None if special_tokens_mask is None else special_tokens_mask.reshape(-1)
    selected, u = _common(flat, special, mlm_probability, generator)
    labels = torch.where(selected, flat, -100)
    masked = _replace(
        flat,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels  # still (B*T,): forgot .view_as(input_ids)


@wrong("swapped_outputs")
def swapped_outputs(
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
    """Returns (labels, masked_input_ids) instead of (masked_input_ids, labels)."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return labels, masked


@wrong("selects_exact_count")
def floor_count_per_row(
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
    """Selects exactly int(p * eligible) positions per row (rounded down, never varying) instead of
    each position with probability p: the rate is low on short rows."""
    eligible = _eligible(input_ids, special_tokens_mask).reshape(-1, input_ids.shape[-1])
    selected = torch.zeros_like(eligible)
    for row in range(eligible.shape[0]):
        pos = eligible[row].nonzero().flatten()
        k = int(mlm_probability * len(pos))  # a fixed count per row, rounded down
        pick = pos[torch.randperm(len(pos), generator=generator)[:k]]
        selected[row, pick] = True
    selected = selected.reshape(input_ids.shape)
    u = torch.rand(input_ids.shape, generator=generator)
    labels = torch.where(selected, input_ids, -100)
    masked = _replace(
        input_ids,
        selected,
        u,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        pm=mask_replace_prob,
        pr=random_replace_prob,
        generator=generator,
    )
    return masked, labels


@wrong("uses_global_rng")
def python_random_replacement(
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
    """Draws the random replacement ids with Python's random.randrange (global generator), the rest
    from generator=."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = input_ids.masked_fill(selected & (u < mask_replace_prob), mask_token_id)
    to_random = selected & (u >= mask_replace_prob) & (u < mask_replace_prob + random_replace_prob)
    for idx in to_random.nonzero().tolist():
        masked[tuple(idx)] = random.randrange(vocab_size)  # Python's global generator
    return masked, labels


@wrong("random_ids_not_uniform")
def random_from_batch(
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
    """Random replacements are tokens copied from the batch itself (its unigram distribution), not
    ids uniform in [0, vocab_size)."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = input_ids.masked_fill(selected & (u < mask_replace_prob), mask_token_id)
    to_random = selected & (u >= mask_replace_prob) & (u < mask_replace_prob + random_replace_prob)
    flat = input_ids.reshape(-1)
    pick = torch.randint(flat.numel(), (int(to_random.sum()),), generator=generator)
    masked[to_random] = flat[pick]  # "a random token": one of the batch's own tokens
    return masked, labels


@wrong("fails_when_nothing_selected")
def stacks_random_ids(
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
    """Builds the random ids with torch.stack of a list: raises when no position gets a random id
    (mlm_probability=0, random_replace_prob=0)."""
    selected, u = _common(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, -100)
    masked = input_ids.masked_fill(selected & (u < mask_replace_prob), mask_token_id)
    to_random = selected & (u >= mask_replace_prob) & (u < mask_replace_prob + random_replace_prob)
    draws = [
        torch.randint(vocab_size, (), generator=generator) for _ in range(int(to_random.sum()))
    ]
    masked[to_random] = torch.stack(draws)  # torch.stack([]) raises when nothing is drawn
    return masked, labels


# --------------------------------------------------------------------------------------------
# correct attempts
# --------------------------------------------------------------------------------------------


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
    replaced = (
        torch.bernoulli(
            torch.full(labels.shape, float(mask_replace_prob)), generator=generator
        ).bool()
        & selected
    )
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


class _StubTokenizer:
    """Just what DataCollatorForLanguageModeling reads from a tokenizer."""

    mask_token = "[MASK]"

    def __init__(self, mask_token_id, vocab_size):
        self._mask_id, self._size = mask_token_id, vocab_size

    def __len__(self):
        return self._size

    def convert_tokens_to_ids(self, token):
        return self._mask_id


@correct
def via_transformers_collator(
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
    """DataCollatorForLanguageModeling.torch_mask_tokens itself, on a clone, with the caller's
    generator."""
    collator = DataCollatorForLanguageModeling(
        _StubTokenizer(mask_token_id, vocab_size),
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
    )
    collator.generator = generator
    special = special_tokens_mask
    if special is None:
        special = torch.zeros_like(input_ids, dtype=torch.bool)
    return collator.torch_mask_tokens(input_ids.clone(), special_tokens_mask=special)


# --------------------------------------------------------------------------------------------
# first drafts and other naive versions
# --------------------------------------------------------------------------------------------


def _naive_select(input_ids, special_tokens_mask, p, generator):
    """Each eligible position with probability ``p`` (one Bernoulli draw per position)."""
    probs = torch.full(input_ids.shape, p)
    if special_tokens_mask is not None:
        probs[special_tokens_mask.bool()] = 0.0
    return torch.bernoulli(probs, generator=generator).bool()


def _naive_corrupt(input_ids, selected, mask_token_id, vocab_size, pm, pr, generator):
    """80/10/10 on a copy, the random share scaled to what [MASK] leaves (guarded at pm = 1)."""
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, pm), generator=generator).bool()
    masked[to_mask & selected] = mask_token_id
    p_random = pr / (1 - pm) if pm < 1 else 0.0
    to_random = torch.bernoulli(torch.full(input_ids.shape, p_random), generator=generator).bool()
    to_random &= selected & ~to_mask
    masked[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return masked


@wrong("uses_global_rng")
def draft_as_written(
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
    """A first draft: global RNG, specials not excluded, fixed 80/10/10, a boolean mask returned
    instead of labels."""
    chosen = torch.rand(input_ids.shape) < mlm_probability
    out = input_ids.clone()
    how = torch.rand(input_ids.shape)
    out[chosen & (how < 0.8)] = mask_token_id
    rnd = chosen & (how >= 0.8) & (how < 0.9)
    out[rnd] = torch.randint(0, vocab_size, input_ids.shape)[rnd]
    return out, chosen


@wrong("uses_global_rng")
def draft_with_labels(input_ids, *, mask_token_id, vocab_size, mlm_probability=0.15, **unused):
    """The first draft with -100 labels bolted on: still masks specials, ignores the replace
    probabilities and the generator."""
    out, chosen = draft_as_written(
        input_ids,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        mlm_probability=mlm_probability,
    )
    return out, torch.where(chosen, input_ids, -100)


@wrong("masks_special_tokens")
def hard_coded_bert_specials(
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
    """Excludes BERT's [PAD]=0, [CLS]=101, [SEP]=102 by value instead of using the mask."""
    probs = torch.full(input_ids.shape, mlm_probability)
    probs[(input_ids == 0) | (input_ids == 101) | (input_ids == 102)] = 0.0
    selected = torch.bernoulli(probs, generator=generator).bool()
    masked = _naive_corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, input_ids, -100)


@wrong("labels_not_ignored")
def zero_labels_elsewhere(
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
    """Labels = input_ids * selected: 0, a real token id, where nothing is to be predicted."""
    selected = _naive_select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _naive_corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, input_ids * selected


@wrong("int_mask_not_bool")
def tilde_on_long_mask(
    input_ids, *, special_tokens_mask=None, mlm_probability=0.15, generator=None, **unused
):
    """``~special_tokens_mask`` on a 0/1 long tensor (bitwise not: -1 and -2, both true)."""
    probs = torch.full(input_ids.shape, mlm_probability)
    probs = probs.masked_fill(~special_tokens_mask, 0.0)  # ~ on a 0/1 long tensor, not a bool one
    selected = torch.bernoulli(probs, generator=generator).bool()
    return input_ids.clone(), torch.where(selected, input_ids, -100)


@wrong("divides_by_zero")
def unguarded_division(
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
    """Scales the random share by random_replace_prob / (1 - mask_replace_prob) without a guard:
    ZeroDivisionError at mask_replace_prob = 1."""
    selected = _naive_select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob), generator=generator)
    to_mask = to_mask.bool() & selected
    masked[to_mask] = mask_token_id
    p = random_replace_prob / (1 - mask_replace_prob)  # ZeroDivisionError at mask_replace_prob=1
    to_random = torch.bernoulli(torch.full(input_ids.shape, p), generator=generator).bool()
    to_random &= selected & ~to_mask
    masked[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return masked, torch.where(selected, input_ids, -100)


@wrong("wrong_type")
def returns_the_inputs_only(input_ids, **kwargs):
    """Returns the corrupted input_ids alone, not the pair (input_ids, labels)."""
    return three_bernoullis(input_ids, **kwargs)[0]


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.masking.mask_tokens")
def the_course_mask_tokens(
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
    """Calls the course's own mask_tokens (the lesson's setup imports it): nothing written."""
    import lmlessons

    return lmlessons.mask_tokens(
        input_ids,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        special_tokens_mask=special_tokens_mask,
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
        generator=generator,
    )


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(input_ids, **kwargs):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions import mask_tokens

    return mask_tokens(input_ids, **kwargs)
