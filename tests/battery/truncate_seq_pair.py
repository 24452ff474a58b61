"""Attempts at ``truncate_seq_pair`` (lesson 05, section 4): while the pair is longer than
``max_num_tokens``, remove one token from the side longer at that moment, from its front or back
with probability 1/2 each (from ``generator``); return two new lists, inputs untouched.

Most wrong attempts are Google's loop with one part changed: they pass that part (which side,
which end, the budget) to :func:`_truncate` with the rest of the arguments (``**kw``). An
edited input, a draw from torch's global generator and the reference itself are
``battery/_structural.py``.
"""

from __future__ import annotations

import random
from collections import deque
from itertools import cycle

import torch

from battery._attempt import correct, wrong


def _longer(a: list, b: list) -> list:
    """The side longer now (B on a tie, as Google's ``a if len(a) > len(b) else b``)."""
    return a if len(a) > len(b) else b


def _shorter(a: list, b: list) -> list:
    """The side shorter now (B on a tie), or the other once it is empty."""
    return (a or b) if len(a) < len(b) else (b or a)


def _random_end(side: list, generator) -> int:
    """Where to remove from ``side``: the front (probability 1/2, from ``generator``) or back."""
    return 0 if torch.rand((), generator=generator) < 0.5 else -1


def _truncate(tokens_a, tokens_b, max_num_tokens, generator=None, *, pick=_longer, at=_random_end):
    """Google's loop on copies: ``side.pop(at(side, generator))`` for ``side = pick(a, b)``
    while the pair is too long."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        side = pick(a, b)
        side.pop(at(side, generator))
    return a, b


# ---------------------------------------------------------------- wrong attempts


@wrong("trims_shorter_side")
def trims_shorter(tokens_a, tokens_b, max_num_tokens, **kw):
    """Removes each token from the shorter side (the other once it is empty)."""
    return _truncate(tokens_a, tokens_b, max_num_tokens, pick=_shorter, **kw)


@wrong("trims_shorter_side")
def compares_lists(tokens_a, tokens_b, max_num_tokens, **kw):
    """`a if a > b` compares the lists' contents, not their lengths, so it often trims the shorter
    side."""

    def pick(a, b):
        return (a or b) if a > b else (b or a)  # lexicographic, not lengths

    return _truncate(tokens_a, tokens_b, max_num_tokens, pick=pick, **kw)


@wrong("always_trims_end")
def always_from_back(tokens_a, tokens_b, max_num_tokens, **kw):
    """Always removes the last token of the longer side, never the first."""
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda side, g: -1, **kw)


@wrong("always_trims_front")
def always_from_front(tokens_a, tokens_b, max_num_tokens, **kw):
    """Always removes the first token of the longer side, never the last."""
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda side, g: 0, **kw)


@wrong("ignores_generator")
def alternates_ends(tokens_a, tokens_b, max_num_tokens, **kw):
    """Alternates front, back, front... deterministically instead of a coin per token from
    generator."""
    ends = cycle((0, -1))  # "balanced", but not random
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda side, g: next(ends), **kw)


@wrong("one_end_per_call")
def one_end_for_all(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Draws front/back once per call and removes every token from that end."""
    end = _random_end([], generator)  # drawn once per call, not once per removed token
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda side, g: end)


@wrong("removes_from_middle")
def random_position(tokens_a, tokens_b, max_num_tokens, **kw):
    """Removes a token at a random position of the longer side, often from the middle."""

    def at(side, generator):
        return int(torch.randint(len(side), (), generator=generator))  # anywhere in the side

    return _truncate(tokens_a, tokens_b, max_num_tokens, at=at, **kw)


@wrong("uses_global_rng")
def python_random(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Draws front/back with Python's random.random (global generator)."""
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda s, g: -(random.random() >= 0.5))


@wrong("repeats_per_call")
def reseeds_from_generator(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """random.Random(generator.initial_seed()): every call with the same generator trims the same
    way (the generator never advances)."""
    rng = random.Random(generator.initial_seed() if generator is not None else None)
    return _truncate(tokens_a, tokens_b, max_num_tokens, at=lambda s, g: -(rng.random() >= 0.5))


@wrong("off_by_one")
def off_by_one(tokens_a, tokens_b, max_num_tokens, **kw):
    """Loops while the total is >= max_num_tokens: a trimmed pair ends one token short and a pair
    that fits exactly loses a token."""
    return _truncate(tokens_a, tokens_b, max_num_tokens - 1, **kw)  # `>= max` is `> max - 1`


@wrong("wrong_total")
def reserves_specials_again(tokens_a, tokens_b, max_num_tokens, **kw):
    """Subtracts 3 for [CLS]/[SEP]/[SEP] again, so pairs are trimmed to max_num_tokens - 3."""
    return _truncate(tokens_a, tokens_b, max_num_tokens - 3, **kw)  # already reserved


@wrong("wrong_total")
def half_budget_each(tokens_a, tokens_b, max_num_tokens, **kw):
    """Cuts each side to max_num_tokens // 2, trimming the long side of a pair that fits or trimming
    more than needed."""
    half = max_num_tokens // 2
    a, _ = _truncate(tokens_a, [], half, **kw)
    b, _ = _truncate(tokens_b, [], half, **kw)
    return a, b


@wrong("trims_both_sides")
def trims_both(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Removes one token from each side per step."""
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        for side in (a, b):
            if side:
                side.pop(_random_end(side, generator))
    return a, b


@wrong("longer_decided_once")
def longer_decided_once(tokens_a, tokens_b, max_num_tokens, **kw):
    """Decides which side is longer once before the loop and keeps trimming it after it has become
    the shorter one."""
    a_longer = len(tokens_a) > len(tokens_b)  # decided before the loop, never updated

    def pick(a, b):
        return (a or b) if a_longer else (b or a)

    return _truncate(tokens_a, tokens_b, max_num_tokens, pick=pick, **kw)


@wrong("returns_same_lists")
def same_lists_when_fits(tokens_a, tokens_b, max_num_tokens, **kw):
    """Returns the caller's own list objects when the pair already fits (not new lists, as
    promised)."""
    if len(tokens_a) + len(tokens_b) <= max_num_tokens:
        return tokens_a, tokens_b  # the caller's own lists, not new ones
    return _truncate(tokens_a, tokens_b, max_num_tokens, **kw)


@wrong("wrong_type")
def returns_tensors(tokens_a, tokens_b, max_num_tokens, **kw):
    """Returns two LongTensors instead of two lists."""
    a, b = _truncate(tokens_a, tokens_b, max_num_tokens, **kw)
    return torch.tensor(a, dtype=torch.long), torch.tensor(b, dtype=torch.long)


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


@wrong("delegates_to_course", says="lmlessons.pairs.truncate_seq_pair")
def the_course_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Calls the course's own truncate_seq_pair (the lesson's setup imports it)."""
    from lmlessons import truncate_seq_pair

    return truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, generator=generator)


# ---------------------------------------------------------------- correct attempts


@correct
def index_window(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Index windows over the inputs, sliced at the end."""
    win = [[0, len(tokens_a)], [0, len(tokens_b)]]
    while (win[0][1] - win[0][0]) + (win[1][1] - win[1][0]) > max_num_tokens:
        side = win[0] if win[0][1] - win[0][0] > win[1][1] - win[1][0] else win[1]
        if torch.rand((), generator=generator) < 0.5:
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
