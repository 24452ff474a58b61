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
    check_int,
    check_int_tensor,
    check_probability,
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
    vocab_size = check_int("vocab_size", vocab_size, minimum=1)
    mask_token_id = check_int("mask_token_id", mask_token_id)
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(
            f"mask_token_id must be in [0, vocab_size={vocab_size}), got {mask_token_id}"
        )
    p = check_probability("mlm_probability", mlm_probability)
    p_mask = check_probability("mask_replace_prob", mask_replace_prob)
    p_random = check_probability("random_replace_prob", random_replace_prob)
    if p_mask + p_random > 1.0 + 1e-12:
        raise ValueError(
            f"mask_replace_prob + random_replace_prob must be <= 1 (the rest are kept), "
            f"got {p_mask} + {p_random} = {p_mask + p_random}"
        )
    generator = check_generator(generator)
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab_size):
        raise ValueError(f"input_ids must be in [0, vocab_size={vocab_size}); found ids outside it")
    if special_tokens_mask is not None:
        if not isinstance(special_tokens_mask, torch.Tensor):
            raise TypeError(
                f"special_tokens_mask must be a torch.Tensor or None, got {type(special_tokens_mask).__name__}"
            )
        if special_tokens_mask.shape != input_ids.shape:
            raise ValueError(
                f"special_tokens_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {tuple(special_tokens_mask.shape)}"
            )

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
