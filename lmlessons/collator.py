"""A masking collator in the style of transformers' ``DataCollatorForLanguageModeling``.

It pads a list of examples, derives the special-tokens mask from the tokenizer (every id in
``tokenizer.all_special_ids``, padding included), and calls :func:`lmlessons.mask_tokens`, so
callers never hand-build the mask and [CLS]/[SEP]/[PAD] are never selected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lmlessons._checks import (
    check_generator,
    check_int,
    check_probability,
    check_replace_probs,
    check_tokenizer,
)
from lmlessons.masking import mask_tokens

__all__ = ["MLMCollator", "special_token_ids"]


def special_token_ids(tokenizer: Any) -> torch.Tensor:
    """The ids never selected for masking: every id in ``tokenizer.all_special_ids`` (padding
    included), sorted, as a LongTensor for ``torch.isin(input_ids, ...)``."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)


class MLMCollator:
    """Turn examples into a padded, masked MLM batch.

    Args:
        tokenizer: a transformers tokenizer with ``mask_token_id`` and ``pad_token_id``.
        mlm_probability, mask_replace_prob, random_replace_prob: as in :func:`mask_tokens`.
        max_length: truncate texts to this many tokens (special tokens included).
        generator: a ``torch.Generator`` used for every batch (seed it to reproduce a run).
            transformers' collator takes ``seed=`` instead (early versions tested ``if self.seed``
            and so ignored a seed of 0; 5.x tests ``is not None``).

    Calling it on a list of strings, of ``{"input_ids": [...]}`` dicts, or of id lists returns
    ``input_ids`` ``(B, T)``, ``attention_mask`` ``(B, T)``, ``labels`` ``(B, T)`` (-100 where not
    selected) and ``token_type_ids`` when the tokenizer makes them.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        max_length: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.tokenizer = check_tokenizer(
            tokenizer, ("mask_token_id", "pad_token_id", "all_special_ids")
        )
        self.mlm_probability = check_probability("mlm_probability", mlm_probability)
        self.mask_replace_prob, self.random_replace_prob = check_replace_probs(
            mask_replace_prob, random_replace_prob
        )
        self.max_length = (
            None if max_length is None else check_int("max_length", max_length, minimum=2)
        )
        self.generator = check_generator(generator)
        self.special_ids = special_token_ids(tokenizer)

    def _encode(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        if all(isinstance(e, str) for e in examples):
            return dict(
                tok(
                    list(examples),
                    padding=True,
                    truncation=self.max_length is not None,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
            )
        if all(isinstance(e, Mapping) for e in examples):
            features = [
                {
                    k: v
                    for k, v in e.items()
                    if k in ("input_ids", "token_type_ids", "attention_mask")
                }
                for e in examples
            ]
        elif all(isinstance(e, (list, tuple, torch.Tensor)) for e in examples):
            features = [
                {"input_ids": list(e.tolist() if isinstance(e, torch.Tensor) else e)}
                for e in examples
            ]
        else:
            raise TypeError(
                "examples must all be strings, all dicts with 'input_ids', "
                "or all lists of token ids"
            )
        return dict(tok.pad(features, padding=True, return_tensors="pt"))

    def __call__(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        if (
            isinstance(examples, (str, bytes))
            or not isinstance(examples, Sequence)
            or len(examples) == 0
        ):
            raise ValueError("examples must be a non-empty list")
        batch = self._encode(examples)
        input_ids = batch["input_ids"]  # (B, T)
        special = torch.isin(input_ids, self.special_ids)  # (B, T): [CLS], [SEP], [PAD], ...
        batch["input_ids"], batch["labels"] = mask_tokens(
            input_ids,
            mask_token_id=self.tokenizer.mask_token_id,
            vocab_size=len(self.tokenizer),
            special_tokens_mask=special,
            mlm_probability=self.mlm_probability,
            mask_replace_prob=self.mask_replace_prob,
            random_replace_prob=self.random_replace_prob,
            generator=self.generator,
        )
        return batch
