"""Attempts at ``truncate_seq_pair`` (lesson 05, section 4): while the pair is longer than
``max_num_tokens``, remove one token from the side longer at that moment, from its front or back
with probability 1/2 each (from ``generator``); return two new lists, inputs untouched."""

from __future__ import annotations

import random
from collections import deque

import torch

from battery._attempt import correct, wrong


def _coin(generator) -> bool:
    """True (front) with probability 1/2, from ``generator``."""
    return bool(torch.rand((), generator=generator) < 0.5)


def _trim(longer: list, generator) -> None:
    if _coin(generator):
        del longer[0]
    else:
        longer.pop()


# --------------------------------------------------------------------------------------------
# wrong attempts
# --------------------------------------------------------------------------------------------


@wrong("modifies_input")
def trims_in_place(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Google's in-place version: trims and returns the caller's lists."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        _trim(tokens_a if len(tokens_a) > len(tokens_b) else tokens_b, generator)
    return tokens_a, tokens_b


@wrong("trims_shorter_side")
def trims_shorter(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Removes each token from the shorter side."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        shorter = a if len(a) < len(b) else b
        if not shorter:  # nothing left on that side: take from the other
            shorter = b if shorter is a else a
        _trim(shorter, generator)
    return a, b


@wrong("always_trims_end")
def always_from_back(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Always removes the last token of the longer side, never the first."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


@wrong("ignores_generator")
def alternates_ends(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Alternates front, back, front... deterministically instead of a coin per token from
    generator."""
    a, b = list(tokens_a), list(tokens_b)
    front = True
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if front:
            del longer[0]
        else:
            longer.pop()
        front = not front  # "balanced", but not random
    return a, b


@wrong("one_end_per_call")
def one_end_for_all(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Draws front/back once per call and removes every token from that end."""
    a, b = list(tokens_a), list(tokens_b)
    front = _coin(generator)  # drawn once per call, not once per removed token
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if front:
            del longer[0]
        else:
            longer.pop()
    return a, b


@wrong("trims_both_sides")
def trims_both(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Removes one token from each side per step."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        for side in (a, b):
            if side:
                _trim(side, generator)
    return a, b


@wrong("removes_from_middle")
def random_position(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Removes a token at a random position of the longer side, often from the middle."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        del longer[int(torch.randint(len(longer), (), generator=generator))]
    return a, b


@wrong("uses_global_rng")
def python_random(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Draws front/back with Python's random.random (global generator)."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if random.random() < 0.5:
            del longer[0]
        else:
            longer.pop()
    return a, b


@wrong("off_by_one")
def off_by_one(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Loops while the total is >= max_num_tokens: a trimmed pair ends one token short and a pair
    that fits exactly loses a token."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) >= max_num_tokens:
        _trim(a if len(a) > len(b) else b, generator)
    return a, b


@wrong("wrong_total")
def reserves_specials_again(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Subtracts 3 for [CLS]/[SEP]/[SEP] again, so pairs are trimmed to max_num_tokens - 3."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens - 3:  # [CLS] [SEP] [SEP] are already reserved
        _trim(a if len(a) > len(b) else b, generator)
    return a, b


@wrong("longer_decided_once")
def longer_decided_once(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Decides which side is longer once before the loop and keeps trimming it after it has become
    the shorter one."""
    a, b = list(tokens_a), list(tokens_b)
    longer = a if len(a) > len(b) else b  # decided before the loop, never updated
    while len(a) + len(b) > max_num_tokens and longer:
        _trim(longer, generator)
    while len(a) + len(b) > max_num_tokens:
        _trim(b if longer is a else a, generator)
    return a, b


@wrong("trims_shorter_side")
def compares_lists(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """`a if a > b` compares the lists' contents, not their lengths, so it often trims the shorter
    side."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if a > b else b  # compares the lists (lexicographic), not their lengths
        if not longer:
            longer = b if longer is a else a
        _trim(longer, generator)
    return a, b


@wrong("returns_same_lists")
def same_lists_when_fits(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Returns the caller's own list objects when the pair already fits (not new lists, as
    promised)."""
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b  # the caller's own lists, not new ones
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        _trim(a if len(a) > len(b) else b, generator)
    return a, b


@wrong("wrong_total")
def half_budget_each(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Cuts each side to max_num_tokens // 2, trimming the long side of a pair that fits or trimming
    more than needed."""
    half = max_num_tokens // 2
    out = []
    for side in (list(tokens_a), list(tokens_b)):
        while len(side) > half:
            _trim(side, generator)
        out.append(side)
    return out[0], out[1]


@wrong("wrong_type")
def returns_tensors(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Returns two LongTensors instead of two lists."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        _trim(a if len(a) > len(b) else b, generator)
    return torch.tensor(a, dtype=torch.long), torch.tensor(b, dtype=torch.long)


@wrong("repeats_per_call")
def reseeds_from_generator(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """random.Random(generator.initial_seed()): every call with the same generator trims the same
    way (the generator never advances)."""
    rng = random.Random(generator.initial_seed() if generator is not None else None)
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()
    return a, b


# --------------------------------------------------------------------------------------------
# correct attempts
# --------------------------------------------------------------------------------------------


@correct
def index_window(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Index windows over the inputs, sliced at the end."""
    win = [[0, len(tokens_a)], [0, len(tokens_b)]]
    while (win[0][1] - win[0][0]) + (win[1][1] - win[1][0]) > max_num_tokens:
        side = win[0] if win[0][1] - win[0][0] > win[1][1] - win[1][0] else win[1]
        if _coin(generator):
            side[0] += 1
        else:
            side[1] -= 1
    return list(tokens_a[win[0][0] : win[0][1]]), list(tokens_b[win[1][0] : win[1][1]])


@correct
def final_lengths_then_binomial(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Final lengths first, then a sum of fair coins for each front."""
    la, lb = len(tokens_a), len(tokens_b)
    while la + lb > max_num_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    out = []
    for tokens, keep in ((tokens_a, la), (tokens_b, lb)):
        cut = len(tokens) - keep
        front = int((torch.rand(cut, generator=generator) < 0.5).sum()) if cut else 0
        out.append(list(tokens[front : front + keep]))
    return out[0], out[1]


@correct
def deque_with_bits_upfront(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Deques, every coin drawn at once, ties trim B."""
    a, b = deque(tokens_a), deque(tokens_b)
    excess = max(0, len(a) + len(b) - max_num_tokens)
    coins = torch.randint(0, 2, (excess,), generator=generator).tolist()
    for coin in coins:
        longer = b if len(b) >= len(a) else a  # on a tie trim B, as Google does
        if coin:
            longer.popleft()
        else:
            longer.pop()
    return list(a), list(b)


# --------------------------------------------------------------------------------------------
# first drafts and other naive versions
# --------------------------------------------------------------------------------------------


@wrong("modifies_input")
def draft_as_written(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Google's original as a first draft: trims the caller's lists in place, returns None,
    Python's random."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if random.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


@wrong("always_trims_front")
def always_from_front(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Always removes the first token of the longer side, never the last."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        del (a if len(a) > len(b) else b)[0]
    return a, b


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.pairs.truncate_seq_pair")
def the_course_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Calls the course's own truncate_seq_pair (the lesson's setup imports it)."""
    from lmlessons import truncate_seq_pair

    return truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, generator=generator)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions import truncate_seq_pair

    return truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, generator=generator)
