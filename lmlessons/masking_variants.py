"""Other ways to choose the MLM targets: BERT's exact count, whole words, SpanBERT spans.

:func:`lmlessons.mask_tokens` selects each token on its own with probability ``mlm_probability``
(transformers' ``DataCollatorForLanguageModeling``), so the number of targets per sequence varies
(it is binomial). The original recipes differ (fairseq's ``MaskTokensDataset``, which RoBERTa
used, draws a count too: ``int(mask_prob * len + random())``, lesson 01):

* **Exact count** (Google BERT, ``create_pretraining_data.py``, ``create_masked_lm_predictions``):
  every sequence gets ``min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))``
  targets, a uniformly random subset of its non-[CLS]/[SEP] tokens. ``len(tokens)`` counts
  [CLS] and [SEP] but not padding (the script masks before padding).
* **Whole-word masking** (same script, ``do_whole_word_mask``, added in May 2019): a word split
  into WordPieces (``un ##believ ##able``) is chosen or skipped as a whole; whole words are added in
  random order until the count is reached, skipping a word that would overshoot it. Each chosen
  piece still gets its own 80/10/10 draw and is predicted on its own.
* **Span masking** (SpanBERT, Joshi et al. 2020, section 3.1; ``pretraining/fairseq/data/
  masking.py``): spans of whole words whose length in words is drawn from a geometric
  distribution with ``p = 0.2`` restricted to 1..10 (SpanBERT's ``len_distrib`` renormalises the
  probabilities of 1..10, mean 3.8 words; the paper calls this "clipping"), each starting at a
  random unmasked word, until ``ceil(15%)`` of the tokens are selected. The 80/10/10 replacement
  is drawn once per span ("at the span level and not for each token individually").

All three return ``(masked_input_ids, labels)`` with labels = original id at the targets and -100
elsewhere, exactly like :func:`lmlessons.mask_tokens`, so :func:`lmlessons.mlm_loss` and
``BertForMaskedLM`` take them unchanged. Every random draw goes through ``generator``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch

from lmlessons._checks import (
    IGNORE_INDEX,
    check_generator,
    check_int,
    check_int_tensor,
    check_probability,
    check_replace_probs,
    check_vocab,
)
from lmlessons.masking import mask_tokens

__all__ = [
    "wordpiece_continuation_mask",
    "word_ids",
    "num_to_predict",
    "select_exact_count",
    "select_whole_words",
    "span_length_pmf",
    "sample_span_lengths",
    "select_spans",
    "replace_selected",
    "mask_tokens_exact_count",
    "mask_whole_words",
    "mask_spans",
]


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


def _as_2d(name: str, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if x.dim() == 1:
        return x.unsqueeze(0), True
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T) or (T,), got {tuple(x.shape)}")
    return x, False


def _bool_mask(name: str, mask: object, shape: torch.Size) -> torch.Tensor:
    """A required mask of ``shape``: bool, or integers that are all 0 or 1; returned as bool."""
    if mask is None:
        raise TypeError(f"{name} is required: a bool tensor of shape {tuple(shape)}")
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of 0/1 or bool, got {type(mask).__name__}")
    if mask.dtype.is_floating_point or mask.dtype.is_complex:
        raise TypeError(f"{name} must hold bool or 0/1 integers, got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have shape {tuple(shape)} (that of input_ids), got {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool and mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0 and 1")
    return mask.bool()


def _optional_mask(name: str, mask: object, shape: torch.Size) -> torch.Tensor | None:
    return None if mask is None else _bool_mask(name, mask, shape)


def _required_mask(name: str, mask: object) -> torch.Tensor:
    """A required mask whose shape sets the shape of the others."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of 0/1 or bool, got {type(mask).__name__}")
    return _bool_mask(name, mask, mask.shape)


def _eligible(
    shape: torch.Size, special_tokens_mask: torch.Tensor | None, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    eligible = torch.ones(shape, dtype=torch.bool)
    if special_tokens_mask is not None:
        eligible &= ~special_tokens_mask
    if attention_mask is not None:
        eligible &= attention_mask
    return eligible


def _check_count_args(
    mlm_probability: float, max_predictions_per_seq: int | None
) -> tuple[float, int | None]:
    p = check_probability("mlm_probability", mlm_probability)
    if max_predictions_per_seq is not None:
        max_predictions_per_seq = check_int(
            "max_predictions_per_seq", max_predictions_per_seq, minimum=0
        )
    return p, max_predictions_per_seq


# ---------------------------------------------------------------------------------------------
# words
# ---------------------------------------------------------------------------------------------


def wordpiece_continuation_mask(
    input_ids: torch.Tensor, tokenizer: Any, *, prefix: str = "##"
) -> torch.Tensor:
    """``(B, T)`` bool: True where the token continues the previous word (``"##ing"``).

    WordPiece marks every piece of a word except the first with ``prefix`` (BERT: ``"##"``), so
    ``"unbelievable" -> ["un", "##believ", "##able"]``. Token strings come from
    ``tokenizer.convert_ids_to_tokens``; no id is hard-coded.
    """
    input_ids = check_int_tensor("input_ids", input_ids)
    if not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise TypeError("tokenizer must have convert_ids_to_tokens (a transformers tokenizer)")
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty str, got {prefix!r}")
    ids, squeeze = _as_2d("input_ids", input_ids)
    rows = [
        [tok.startswith(prefix) for tok in tokenizer.convert_ids_to_tokens(row)]
        for row in ids.tolist()
    ]
    out = torch.tensor(rows, dtype=torch.bool).reshape(ids.shape)
    return out[0] if squeeze else out


def word_ids(
    is_continuation: torch.Tensor, special_tokens_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, T)`` long: the word each token belongs to (0, 1, ... per row), -1 on special tokens.

    A token starts a new word unless it is a continuation piece *and* the token before it is a
    word token (a ``##`` piece right after [CLS] or [SEP] starts its own word).
    """
    is_continuation = _required_mask("is_continuation", is_continuation)
    cont, squeeze = _as_2d("is_continuation", is_continuation)
    special = _optional_mask("special_tokens_mask", special_tokens_mask, is_continuation.shape)
    special = None if special is None else _as_2d("special_tokens_mask", special)[0]
    eligible = _eligible(cont.shape, special, None)  # (B, T)
    prev_eligible = torch.zeros_like(eligible)
    prev_eligible[:, 1:] = eligible[:, :-1]
    starts = eligible & (~cont | ~prev_eligible)  # (B, T)
    ids = starts.long().cumsum(dim=1) - 1
    ids = ids.masked_fill(~eligible, -1)
    return ids[0] if squeeze else ids


# ---------------------------------------------------------------------------------------------
# exact count (Google BERT)
# ---------------------------------------------------------------------------------------------


def num_to_predict(
    seq_length: int, mlm_probability: float = 0.15, max_predictions_per_seq: int | None = 20
) -> int:
    """Google BERT's per-sequence count: ``min(max_pred, max(1, round(seq_length * p)))``.

    ``seq_length`` counts [CLS] and [SEP] (Google's ``len(tokens)``), not padding. ``round`` is
    Python 3's (half to even). ``mlm_probability=0`` gives 0
    (Google's ``max(1, ...)`` would force one target; asking for none should give none).
    """
    seq_length = check_int("seq_length", seq_length, minimum=0)
    p, max_pred = _check_count_args(mlm_probability, max_predictions_per_seq)
    if p == 0.0 or seq_length == 0:
        return 0
    n = max(1, round(seq_length * p))
    return n if max_pred is None else min(max_pred, n)


def _lengths(shape: torch.Size, attention_mask: torch.Tensor | None) -> list[int]:
    if attention_mask is None:
        return [shape[1]] * shape[0]
    return attention_mask.sum(dim=1).tolist()


def select_exact_count(
    special_tokens_mask: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    max_predictions_per_seq: int | None = 20,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``(B, T)`` bool: in each row, exactly :func:`num_to_predict` positions (fewer only when the
    row has fewer eligible tokens), a uniformly random subset of the non-special tokens.

    Args:
        special_tokens_mask: ``(B, T)``, True at [CLS], [SEP], [PAD] (never selected).
        attention_mask: ``(B, T)``, 1 on real tokens; the row length for the count. ``None``:
            every position is real.
        mlm_probability: Google's ``masked_lm_prob`` (0.15).
        max_predictions_per_seq: Google's cap (20 for 128-token sequences); ``None``: no cap.
        generator: a ``torch.Generator``.
    """
    p, max_pred = _check_count_args(mlm_probability, max_predictions_per_seq)
    generator = check_generator(generator)
    special = _required_mask("special_tokens_mask", special_tokens_mask)
    special2, squeeze = _as_2d("special_tokens_mask", special)
    attn = _optional_mask("attention_mask", attention_mask, special.shape)
    attn2 = None if attn is None else _as_2d("attention_mask", attn)[0]
    eligible = _eligible(special2.shape, special2, attn2)  # (B, T)
    k = torch.tensor(
        [num_to_predict(n, p, max_pred) for n in _lengths(special2.shape, attn2)], dtype=torch.long
    )  # (B,)
    scores = torch.rand(special2.shape, generator=generator)  # (B, T): a random order per row
    scores = scores.masked_fill(~eligible, 2.0)  # ineligible positions sort last
    order = scores.argsort(dim=1)
    rank = torch.empty_like(order)  # rank[b, t]: where position t comes in row b's random order
    rank.scatter_(1, order, torch.arange(order.shape[1]).expand_as(order).contiguous())
    selected = (rank < k[:, None]) & eligible
    return selected[0] if squeeze else selected


def _word_inputs(
    special_tokens_mask: object, is_continuation: object, attention_mask: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
    """The checked masks of a word-level selection, as 2-D: ``(eligible, word ids, attention_mask
    or None, squeeze)``; ``word ids`` is :func:`word_ids` (-1 off words), ``squeeze`` is True
    when the input was 1-D."""
    special = _required_mask("special_tokens_mask", special_tokens_mask)
    cont = _bool_mask("is_continuation", is_continuation, special.shape)
    attn = _optional_mask("attention_mask", attention_mask, special.shape)
    special2, squeeze = _as_2d("special_tokens_mask", special)
    cont2 = _as_2d("is_continuation", cont)[0]
    attn2 = None if attn is None else _as_2d("attention_mask", attn)[0]
    eligible = _eligible(special2.shape, special2, attn2)  # (B, T)
    wids = word_ids(cont2, ~eligible)  # (B, T), -1 off words
    return eligible, wids, attn2, squeeze


def _word_positions(row_word_ids: list[int]) -> list[list[int]]:
    """The positions of each word of one row of :func:`word_ids` (-1 off words), word by word."""
    words: list[list[int]] = [[] for _ in range(max(row_word_ids, default=-1) + 1)]
    for t, w in enumerate(row_word_ids):
        if w >= 0:
            words[w].append(t)
    return words


def select_whole_words(
    special_tokens_mask: torch.Tensor,
    is_continuation: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    max_predictions_per_seq: int | None = 20,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Google BERT's whole-word selection: ``(B, T)`` bool.

    The count is :func:`num_to_predict` tokens (pieces). Words are visited in random order; a word
    is taken whole if it fits in what is left of the count and skipped otherwise, so every piece of
    a word is selected or none is, and a row gets at most the count (it can get fewer when only
    long words are left).
    """
    p, max_pred = _check_count_args(mlm_probability, max_predictions_per_seq)
    generator = check_generator(generator)
    eligible, wids, attn2, squeeze = _word_inputs(
        special_tokens_mask, is_continuation, attention_mask
    )
    selected = torch.zeros_like(eligible)
    for row, length in enumerate(_lengths(eligible.shape, attn2)):
        budget = num_to_predict(length, p, max_pred)
        positions = _word_positions(wids[row].tolist())  # one list per word: none in (B, 0)
        if budget == 0 or not positions:
            continue
        taken = 0
        for w in torch.randperm(len(positions), generator=generator).tolist():
            if taken >= budget:
                break
            if taken + len(positions[w]) > budget:
                continue  # Google: "If adding a whole-word mask would exceed the maximum ..., skip"
            selected[row, positions[w]] = True
            taken += len(positions[w])
    return selected[0] if squeeze else selected


# ---------------------------------------------------------------------------------------------
# spans (SpanBERT)
# ---------------------------------------------------------------------------------------------


def _check_span_args(geometric_p: float, max_span_length: int) -> tuple[float, int]:
    geometric_p = check_probability("geometric_p", geometric_p)
    if geometric_p == 0.0:
        raise ValueError("geometric_p must be in (0, 1] (SpanBERT: 0.2), got 0")
    return geometric_p, check_int("max_span_length", max_span_length, minimum=1)


def span_length_pmf(geometric_p: float = 0.2, max_span_length: int = 10) -> torch.Tensor:
    """``(max_span_length,)`` float64: P(length = 1), ..., P(length = max_span_length).

    ``Geometric(p)`` restricted to ``1..max_span_length`` and renormalised, as SpanBERT's
    ``len_distrib``: ``p (1-p)^(l-1) / sum``. With p = 0.2 and 10 the mean is 3.797 words.
    """
    geometric_p, max_span_length = _check_span_args(geometric_p, max_span_length)
    lengths = torch.arange(1, max_span_length + 1, dtype=torch.float64)
    w = geometric_p * (1.0 - geometric_p) ** (lengths - 1)
    return w / w.sum()


def sample_span_lengths(
    n: int,
    *,
    geometric_p: float = 0.2,
    max_span_length: int = 10,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``(n,)`` long: span lengths in words drawn from :func:`span_length_pmf`."""
    n = check_int("n", n, minimum=0)
    generator = check_generator(generator)
    pmf = span_length_pmf(geometric_p, max_span_length)
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    return torch.multinomial(pmf.float(), n, replacement=True, generator=generator) + 1


def select_spans(
    special_tokens_mask: torch.Tensor,
    is_continuation: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    geometric_p: float = 0.2,
    max_span_length: int = 10,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """SpanBERT's span selection: ``(B, T)`` bool.

    Per row, until ``ceil(mlm_probability * n)`` tokens are selected (``n``: the row's non-special
    tokens): draw a length ``l`` in words (:func:`span_length_pmf`), pick an unselected token
    uniformly, go to the start of its word and select ``l`` consecutive words from there (fewer at
    the end of a segment: a span never crosses [SEP] or [PAD]; stop early once the budget is
    reached). Words are kept whole, so a row can exceed the budget by part of one word (SpanBERT's
    code cuts that last word instead).
    """
    p = check_probability("mlm_probability", mlm_probability)
    geometric_p, max_span_length = _check_span_args(geometric_p, max_span_length)
    generator = check_generator(generator)
    eligible, wids, _, squeeze = _word_inputs(special_tokens_mask, is_continuation, attention_mask)
    selected = torch.zeros_like(eligible)
    for row in range(eligible.shape[0]):
        n = int(eligible[row].sum())
        # SpanBERT: ceil(sent_length * mask_ratio); 1e-9 absorbs 0.15 * 20 = 3.0000000000000004
        budget = math.ceil(p * n - 1e-9)
        if budget == 0:
            continue
        row_w = wids[row].tolist()
        words = _word_positions(row_w)
        n_words = len(words)
        taken = 0
        while taken < budget:
            span_len = int(
                sample_span_lengths(
                    1, geometric_p=geometric_p, max_span_length=max_span_length, generator=generator
                )
            )
            # the anchor is an unselected token (SpanBERT redraws a masked anchor)
            free = (eligible[row] & ~selected[row]).nonzero().flatten()
            anchor = int(free[int(torch.randint(len(free), (), generator=generator))])
            w = row_w[anchor]
            for k in range(span_len):
                if taken >= budget or w + k >= n_words:
                    break
                if k > 0 and words[w + k][0] != words[w + k - 1][-1] + 1:
                    break  # the next word is in another segment: a span does not cross [SEP]
                new = [t for t in words[w + k] if not selected[row, t]]
                selected[row, new] = True
                taken += len(new)
    return selected[0] if squeeze else selected


# ---------------------------------------------------------------------------------------------
# 80 / 10 / 10 on a given selection
# ---------------------------------------------------------------------------------------------


def _runs(selected: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` long: an id per maximal run of selected positions (-1 off runs), numbered
    0, 1, ... over the whole batch."""
    prev = torch.zeros_like(selected)
    prev[:, 1:] = selected[:, :-1]
    starts = selected & ~prev
    ids = starts.flatten().long().cumsum(0).reshape(selected.shape) - 1
    return ids.masked_fill(~selected, -1)


def replace_selected(
    input_ids: torch.Tensor,
    selected: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    per_span: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply [MASK] / random / keep to the ``selected`` positions; return ``(masked, labels)``.

    ``per_span=False``: one draw per token (BERT, whole-word masking), done by
    :func:`lmlessons.mask_tokens` with every selected position forced in. ``per_span=True``:
    one draw per maximal run of selected positions, so a whole span becomes [MASK], or random
    ids, or stays as it was (SpanBERT).
    """
    input_ids = check_int_tensor("input_ids", input_ids)
    sel = _bool_mask("selected", selected, input_ids.shape)
    if not isinstance(per_span, bool):
        raise TypeError(f"per_span must be a bool, got {type(per_span).__name__}")
    if not per_span:
        return mask_tokens(
            input_ids,
            mask_token_id=mask_token_id,
            vocab_size=vocab_size,
            special_tokens_mask=~sel,
            mlm_probability=1.0,
            mask_replace_prob=mask_replace_prob,
            random_replace_prob=random_replace_prob,
            generator=generator,
        )
    mask_token_id, vocab_size = check_vocab(
        input_ids, mask_token_id=mask_token_id, vocab_size=vocab_size
    )
    pm, pr = check_replace_probs(mask_replace_prob, random_replace_prob)
    generator = check_generator(generator)
    ids, squeeze = _as_2d("input_ids", input_ids)
    sel2 = _as_2d("selected", sel)[0]
    runs = _runs(sel2)  # (B, T): span id per selected position, -1 elsewhere
    n_runs = int(runs.max()) + 1 if runs.numel() else 0
    masked = ids.clone()
    if n_runs > 0:
        u = torch.rand(n_runs, generator=generator)[runs.clamp(min=0)]  # (B, T): one draw per span
        to_mask = sel2 & (u < pm)
        to_random = sel2 & (u >= pm) & (u < pm + pr)
        masked = masked.masked_fill(to_mask, mask_token_id)
        n_random = int(to_random.sum())
        if n_random:
            masked[to_random] = torch.randint(
                vocab_size, (n_random,), generator=generator, dtype=ids.dtype
            )
    labels = torch.where(sel2, ids, IGNORE_INDEX)
    if squeeze:
        return masked[0], labels[0]
    return masked, labels


# ---------------------------------------------------------------------------------------------
# one-call versions
# ---------------------------------------------------------------------------------------------


class _Replacement(NamedTuple):
    """The 80/10/10 arguments of a one-call version, as :func:`replace_selected` takes them."""

    mask_token_id: int
    vocab_size: int
    mask_replace_prob: float
    random_replace_prob: float
    generator: torch.Generator | None


def _select_and_replace(
    select: Callable[[torch.Tensor], torch.Tensor],
    input_ids: object,
    special_tokens_mask: torch.Tensor | None,
    replacement: _Replacement,
    *,
    per_span: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The one-call versions: check everything before the first random draw, then
    ``select(special_tokens_mask)`` for the ``(B, T)`` selection, then :func:`replace_selected`
    on it (the random draws in that order)."""
    input_ids = check_int_tensor("input_ids", input_ids)
    _as_2d("input_ids", input_ids)
    check_vocab(
        input_ids, mask_token_id=replacement.mask_token_id, vocab_size=replacement.vocab_size
    )
    check_replace_probs(replacement.mask_replace_prob, replacement.random_replace_prob)
    special = _optional_mask("special_tokens_mask", special_tokens_mask, input_ids.shape)
    if special is None:
        special = torch.zeros(input_ids.shape, dtype=torch.bool)
    return replace_selected(input_ids, select(special), per_span=per_span, **replacement._asdict())


def mask_tokens_exact_count(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    max_predictions_per_seq: int | None = 20,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Google BERT's masking: :func:`select_exact_count`, then 80/10/10 per token.

    Same arguments and return value as :func:`lmlessons.mask_tokens`, plus ``attention_mask``
    (row lengths for the count) and ``max_predictions_per_seq``.
    """
    replacement = _Replacement(
        mask_token_id, vocab_size, mask_replace_prob, random_replace_prob, generator
    )
    select = partial(
        select_exact_count,
        attention_mask=attention_mask,
        mlm_probability=mlm_probability,
        max_predictions_per_seq=max_predictions_per_seq,
        generator=generator,
    )
    return _select_and_replace(select, input_ids, special_tokens_mask, replacement, per_span=False)


def mask_whole_words(
    input_ids: torch.Tensor,
    *,
    is_continuation: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    max_predictions_per_seq: int | None = 20,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Google BERT's whole-word masking: :func:`select_whole_words`, then 80/10/10 per piece.

    ``is_continuation``: ``(B, T)`` bool from :func:`wordpiece_continuation_mask`.
    (transformers' ``DataCollatorForLanguageModeling(whole_word_mask=True)`` instead forces
    ``mask_replace_prob=1``: every chosen piece becomes [MASK].)
    """
    replacement = _Replacement(
        mask_token_id, vocab_size, mask_replace_prob, random_replace_prob, generator
    )
    select = partial(
        select_whole_words,
        is_continuation=is_continuation,
        attention_mask=attention_mask,
        mlm_probability=mlm_probability,
        max_predictions_per_seq=max_predictions_per_seq,
        generator=generator,
    )
    return _select_and_replace(select, input_ids, special_tokens_mask, replacement, per_span=False)


def mask_spans(
    input_ids: torch.Tensor,
    *,
    is_continuation: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    geometric_p: float = 0.2,
    max_span_length: int = 10,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SpanBERT's masking: :func:`select_spans`, then 80/10/10 once per span."""
    replacement = _Replacement(
        mask_token_id, vocab_size, mask_replace_prob, random_replace_prob, generator
    )
    select = partial(
        select_spans,
        is_continuation=is_continuation,
        attention_mask=attention_mask,
        mlm_probability=mlm_probability,
        geometric_p=geometric_p,
        max_span_length=max_span_length,
        generator=generator,
    )
    return _select_and_replace(select, input_ids, special_tokens_mask, replacement, per_span=True)
