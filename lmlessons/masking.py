"""Masked-language-model input corruption (BERT, Devlin et al. 2019, section 3.1).

Mirrors ``DataCollatorForLanguageModeling.torch_mask_tokens`` in transformers: each position that
is not a special token is *selected* with probability ``mlm_probability``; of the selected,
``mask_replace_prob`` become [MASK], ``random_replace_prob`` a random id, and the rest keep their
token. ``labels`` holds the original id where selected and -100 elsewhere, so the loss only counts
selected positions.

One uniform draw ``u`` per position does the work of the collator's three Bernoulli draws: a
position is selected when ``u < p``, and then ``u / p`` is again uniform on [0, 1), so it also
picks [MASK] / random / keep. Same distribution, fewer passes over memory.
"""

from __future__ import annotations

import torch

from lmlessons._checks import (
    IGNORE_INDEX,
    check_generator,
    check_int_tensor,
    check_probability,
    check_replace_probs,
    check_vocab,
)


def _check_special_mask(special_tokens_mask: object, shape: torch.Size) -> None:
    """``None`` or a tensor of the shape of ``input_ids`` (nonzero / True = never selected)."""
    if special_tokens_mask is None:
        return
    if not isinstance(special_tokens_mask, torch.Tensor):
        raise TypeError(
            "special_tokens_mask must be a torch.Tensor or None, "
            f"got {type(special_tokens_mask).__name__}"
        )
    if special_tokens_mask.shape != shape:
        raise ValueError(
            f"special_tokens_mask must have the shape of input_ids {tuple(shape)}, "
            f"got {tuple(special_tokens_mask.shape)}"
        )


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt ``input_ids`` for MLM and return ``(masked_input_ids, labels)``.

    Args:
        input_ids: ``(B, T)`` (or any shape) integer ids in ``[0, vocab_size)``. Not modified.
        mask_token_id: id of ``[MASK]`` (take it from ``tokenizer.mask_token_id``).
        vocab_size: random replacements are drawn from ``[0, vocab_size)`` (``len(tokenizer)``).
        special_tokens_mask: same shape, 1/True where a position must never be selected
            ([CLS], [SEP], [PAD], ...). ``None`` means every position may be selected.
        mlm_probability: chance that an eligible position is selected (BERT: 0.15).
        mask_replace_prob: share of selected positions replaced by ``[MASK]`` (BERT: 0.8).
        random_replace_prob: share replaced by a random id (BERT: 0.1); the rest are kept.
        generator: a ``torch.Generator``; the same seed gives the same result.

    Returns:
        ``masked_input_ids`` ``(B, T)`` and ``labels`` ``(B, T)``: the original id where
        selected, -100 elsewhere.
    """
    input_ids = check_int_tensor("input_ids", input_ids)
    mask_token_id, vocab_size = check_vocab(
        input_ids, mask_token_id=mask_token_id, vocab_size=vocab_size
    )
    p = check_probability("mlm_probability", mlm_probability)
    p_mask, p_random = check_replace_probs(mask_replace_prob, random_replace_prob)
    generator = check_generator(generator)
    _check_special_mask(special_tokens_mask, input_ids.shape)

    u = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # (B, T)
    selected = u < p  # (B, T) bool
    if special_tokens_mask is not None:
        selected &= ~special_tokens_mask.bool()
    labels = torch.where(selected, input_ids, IGNORE_INDEX)  # (B, T)

    # Given u < p, r = u / p is uniform on [0, 1): reuse it to choose [MASK] / random / keep.
    r = u / p if p > 0 else u
    to_mask = selected & (r < p_mask)
    masked = input_ids.masked_fill(to_mask, mask_token_id)  # a copy: the input stays untouched
    if p_random > 0:
        to_random = selected & (r >= p_mask) & (r < p_mask + p_random)
        n_random = int(to_random.sum())
        if n_random:
            masked[to_random] = torch.randint(
                vocab_size,
                (n_random,),
                generator=generator,
                device=input_ids.device,
                dtype=input_ids.dtype,
            )
    return masked, labels
