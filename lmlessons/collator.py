"""A masking collator with the semantics of transformers' ``DataCollatorForLanguageModeling``
(``mlm=True``).

It pads a list of examples as that collator does (``tokenizer.pad``, so every other field of a
dict example passes through: ``next_sentence_label`` is stacked to ``(B,)``, ``token_type_ids``
is padded), never selects a special token ([CLS], [SEP], [PAD], ...), and calls
:func:`lmlessons.mask_tokens`. With a seeded ``generator``, each ``DataLoader`` worker draws from
its own stream, seeded ``seed + worker id`` as transformers seeds its workers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

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


def _check_examples(examples: object) -> Sequence[Any]:
    """A non-empty list of strings, of dicts with ``input_ids``, or of token-id sequences."""
    if (
        isinstance(examples, (str, bytes))
        or not isinstance(examples, Sequence)
        or len(examples) == 0
    ):
        raise ValueError("examples must be a non-empty list")
    if all(isinstance(e, str) for e in examples):
        return examples
    if all(isinstance(e, Mapping) for e in examples):
        keys = set(examples[0])
        for i, e in enumerate(examples):
            if "input_ids" not in e:
                raise ValueError(f"examples[{i}] has no 'input_ids'")
            if "labels" in e:
                raise ValueError(
                    f"examples[{i}] holds 'labels': MLMCollator makes the MLM labels itself; "
                    "drop that field or give it another name"
                )
            if set(e) != keys:
                raise ValueError(
                    f"examples[{i}] has the fields {sorted(e)}, examples[0] has {sorted(keys)}: "
                    "every example needs the same fields"
                )
        return examples
    if all(isinstance(e, (list, tuple, torch.Tensor, np.ndarray)) for e in examples):
        return examples
    raise TypeError(
        "examples must all be strings, all dicts with 'input_ids', or all lists of token ids"
    )


class MLMCollator:
    """Turn examples into a padded, masked MLM batch.

    Args:
        tokenizer: a transformers tokenizer with ``mask_token_id`` and ``pad_token_id``.
        mlm_probability, mask_replace_prob, random_replace_prob: as in :func:`mask_tokens`.
        max_length: truncate *strings* to this many tokens (special tokens included).
        pad_to_multiple_of: pad the length ``T`` up to a multiple of this, as transformers does.
        generator: a ``torch.Generator`` (seed it to reproduce a run). In the main process it is
            used for every batch. In a ``DataLoader`` worker ``k``, the collator draws from a new
            generator seeded ``generator.initial_seed() + k``: the same scheme as transformers'
            ``seed + worker_id``. As there, workers that a ``DataLoader`` starts anew each epoch
            (``persistent_workers=False``) start their streams anew, so each epoch repeats the
            masks of the first; ``persistent_workers=True`` draws new masks every epoch. In any
            other child process it raises ``ValueError`` (transformers does too).
            transformers' collator takes ``seed=`` instead (early versions tested ``if self.seed``
            and so ignored a seed of 0; 5.x tests ``is not None``).

    Examples may be strings (tokenized here), dicts with ``input_ids`` (a tokenizer's output), or
    lists, tuples, tensors or arrays of ids. The batch holds ``input_ids`` ``(B, T)`` (corrupted),
    ``attention_mask`` ``(B, T)``, ``labels`` ``(B, T)`` (-100 where not selected),
    ``token_type_ids`` when the tokenizer or the examples have them, and every other field of dict
    examples, padded or stacked by ``tokenizer.pad`` as in transformers (``next_sentence_label``
    becomes ``(B,)``). A ``special_tokens_mask`` field adds positions that are never selected (the
    tokenizer's special ids never are) and, like ``offset_mapping``, is not returned.

    Where it differs from ``DataCollatorForLanguageModeling(mlm=True)`` on purpose: the same
    distribution from other draws (one uniform per position, see :func:`mask_tokens`); a
    ``labels`` field in an example raises ``ValueError`` (transformers overwrites it); lists of
    ids also get an ``attention_mask``; strings are accepted; the output is torch tensors only.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
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
        self.pad_to_multiple_of = (
            None
            if pad_to_multiple_of is None
            else check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
        )
        self.generator = check_generator(generator)
        self.special_ids = special_token_ids(tokenizer)
        self._worker_stream: tuple[int, torch.Generator] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the generator as its device and its state's bytes. A DataLoader
        whose workers start by spawn or forkserver (macOS and Windows, Linux from Python 3.14)
        sends the collator through torch's pickler, which moves every tensor to shared memory,
        and a ``torch.Generator`` pickled as itself does not survive that (the workers die with
        "unable to resize file"); plain bytes do."""
        state = dict(self.__dict__)
        g = state["generator"]
        state["generator"] = None if g is None else (str(g.device), g.get_state().numpy().tobytes())
        state["_worker_stream"] = None  # a worker makes its own stream
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        saved = state["generator"]
        self.__dict__.update(state)
        if saved is not None:
            device, data = saved
            self.generator = torch.Generator(device=device)
            self.generator.set_state(torch.frombuffer(bytearray(data), dtype=torch.uint8))

    def process_generator(self) -> torch.Generator | None:
        """The generator this process draws from: ``generator`` in the main process, and in
        ``DataLoader`` worker ``k`` its own generator seeded ``generator.initial_seed() + k``."""
        if self.generator is None:
            return None
        info = get_worker_info()
        if info is None:
            if multiprocessing.current_process().name != "MainProcess":
                raise ValueError(
                    "generator: this process is neither the main process nor a DataLoader "
                    "worker, so it cannot get its own random stream (every copy would draw the "
                    "same masks); use a DataLoader with num_workers, or generator=None"
                )
            return self.generator
        if self._worker_stream is None or self._worker_stream[0] != info.id:
            seed = (self.generator.initial_seed() + info.id) % 2**64
            stream = torch.Generator(device=self.generator.device).manual_seed(seed)
            self._worker_stream = (info.id, stream)
        return self._worker_stream[1]

    def _encode(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        if isinstance(examples[0], str):
            return dict(
                tok(
                    list(examples),
                    padding=True,
                    truncation=self.max_length is not None,
                    max_length=self.max_length,
                    pad_to_multiple_of=self.pad_to_multiple_of,
                    return_tensors="pt",
                )
            )
        if isinstance(examples[0], Mapping):
            # transformers' collator drops the offsets too (only its whole-word masking reads them)
            features = [{k: v for k, v in e.items() if k != "offset_mapping"} for e in examples]
        else:
            features = [
                {"input_ids": e.tolist() if isinstance(e, (torch.Tensor, np.ndarray)) else list(e)}
                for e in examples
            ]
        padded = tok.pad(
            features,
            padding=True,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_tensors="pt",
        )
        return dict(padded)

    def __call__(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        examples = _check_examples(examples)
        generator = self.process_generator()
        batch = self._encode(examples)
        input_ids = batch["input_ids"]  # (B, T)
        special = torch.isin(input_ids, self.special_ids)  # (B, T): [CLS], [SEP], [PAD], ...
        given = batch.pop("special_tokens_mask", None)  # (B, T), padded with 1 by tokenizer.pad
        if given is not None:
            special |= given.bool()
        batch["input_ids"], batch["labels"] = mask_tokens(
            input_ids,
            mask_token_id=self.tokenizer.mask_token_id,
            vocab_size=len(self.tokenizer),
            special_tokens_mask=special,
            mlm_probability=self.mlm_probability,
            mask_replace_prob=self.mask_replace_prob,
            random_replace_prob=self.random_replace_prob,
            generator=generator,
        )
        return batch
