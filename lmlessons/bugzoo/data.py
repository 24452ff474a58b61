"""The data every run of the bug zoo reads: single sentences of the course corpus, or the
conversations of the course's instruction set; and the bug zoo's prose (:func:`content`).

Each sentence row is one sentence, ``[CLS] sentence [SEP]``; a batch is padded to its longest
row, as ``tokenizer(texts, padding=True)`` does. Short rows in a padded batch are what several
bugs need to show (padding, special tokens, unequal micro-batches). The chat fine-tuning runs
read :func:`chat_data`: each question and answer of
:func:`lmlessons.course.chat.instruction_set` rendered by the course chat template, with the
template's assistant mask (:func:`lmlessons.course.chat.conversation_labels`) and the length of
its prompt (:func:`lmlessons.course.chat.prompt_length`), as lesson 10 renders them. The DPO
runs read :func:`preference_data`: the pairs of :func:`lmlessons.course.preferences.preference_set`
(the same questions, a right answer chosen and a wrong one rejected) as token ids.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course.batches import tokenize_documents
from lmlessons.course.chat import (
    chat_tokenizer,
    conversation_labels,
    instruction_set,
    prompt_length,
)
from lmlessons.course.content import load as load_content
from lmlessons.course.corpus import Corpus, load_corpus
from lmlessons.course.preferences import encode_pair, preference_set
from lmlessons.course.tokenizer import load_tokenizer

__all__ = [
    "content",
    "SEED",
    "EVAL_SEED",
    "EVAL_BATCH_SIZE",
    "BETA",
    "course_data",
    "Rendered",
    "chat_rows",
    "chat_data",
    "preference_rows",
    "preference_data",
    "sentence_rows",
    "split_by_length",
    "MOE_LENGTH",
    "padded_to_length",
]

SEED = 0  # model initialisation and the training batches of every run
EVAL_SEED = 1234  # held-out masking and NSP pairs
EVAL_BATCH_SIZE = 64
BETA = 0.1  # DPO's beta in every DPO run and measurement (DPOConfig's default)
MOE_LENGTH = 64  # the MoE runs pad every row to this length (padding="max_length")


class Rendered(NamedTuple):
    """One conversation of the instruction set, rendered by the chat template."""

    input_ids: list[int]
    assistant_masks: list[int]  # 1 on the answer and its end-of-turn token
    prompt_length: int  # the tokens before the answer: what the model sees when it answers


def content() -> dict[str, Any]:
    """The bug zoo's prose and tables: ``lmlessons/data/content/bugzoo.toml``, parsed once by the
    course's one content reader."""
    return load_content("bugzoo")


@functools.lru_cache(maxsize=1)
def course_data() -> tuple[Corpus, Any]:
    """The course corpus and tokenizer (loaded once)."""
    return load_corpus("course"), load_tokenizer()


def _render(examples: list[dict[str, Any]], tokenizer: Any) -> list[Rendered]:
    out = []
    for example in examples:
        messages = example["prompt"] + example["completion"]
        row = conversation_labels(tokenizer, messages)
        length = prompt_length(tokenizer, messages)
        out.append(Rendered(row["input_ids"], row["assistant_masks"], length))
    return out


@functools.lru_cache(maxsize=1)
def _chat_tokenizer() -> Any:
    return chat_tokenizer()


@functools.lru_cache(maxsize=2)
def chat_rows(split: str) -> list[Rendered]:
    """The instruction set's conversations of ``split`` (``"train"`` or ``"validation"``),
    rendered (a :class:`Rendered` each, in :func:`~lmlessons.course.chat.instruction_set`'s
    order) by the tokenizer :func:`chat_data` returns; each split rendered once."""
    return _render(instruction_set(split, corpus=course_data()[0]), _chat_tokenizer())


def chat_data() -> tuple[list[Rendered], list[Rendered], Any]:
    """The instruction set's training and held-out conversations (:func:`chat_rows`), and the
    chat tokenizer that rendered them (loaded once)."""
    return chat_rows("train"), chat_rows("validation"), _chat_tokenizer()


@functools.lru_cache(maxsize=2)
def preference_rows(split: str) -> list[dict[str, list[int]]]:
    """The preference pairs of ``split`` (``"train"`` or ``"validation"``) as ``prompt_ids``,
    ``chosen_ids`` and ``rejected_ids`` (:func:`~lmlessons.course.preferences.encode_pair`, with
    the chat tokenizer of :func:`chat_data`), in
    :func:`~lmlessons.course.preferences.preference_set`'s order; each split encoded once."""
    pairs = preference_set(split, corpus=course_data()[0])
    return [encode_pair(_chat_tokenizer(), pair) for pair in pairs]


def preference_data() -> tuple[list[dict[str, list[int]]], list[dict[str, list[int]]]]:
    """The training and held-out preference pairs (:func:`preference_rows`)."""
    return preference_rows("train"), preference_rows("validation")


def sentence_rows(documents: list[list[str]], tokenizer: Any) -> list[list[int]]:
    """``[CLS] sentence [SEP]`` token ids, one row per sentence, in corpus order."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return [[cls, *s, sep] for doc in tokenize_documents(documents, tokenizer) for s in doc]


def split_by_length(rows: list[list[int]], k: int) -> list[list[list[int]]]:
    """``rows`` sorted by length (like the Trainer's ``group_by_length``) in ``k`` pieces: the
    micro-batches of one accumulated step. ``k=1``: the rows as they are, one piece."""
    if k == 1:
        return [rows]
    rows = sorted(rows, key=len)
    size = math.ceil(len(rows) / k)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def padded_to_length(batch: dict[str, Any], length: int, pad_token_id: int) -> dict[str, Any]:
    """A padded causal batch (``input_ids``, ``attention_mask``, ``labels``, ``(B, T)`` each)
    padded on the right to ``length`` columns, as ``tokenizer(texts, padding="max_length")``
    pads: ``pad_token_id``, attention 0 and label -100 on the new columns."""
    import torch.nn.functional as F

    extra = length - batch["input_ids"].shape[-1]
    if extra < 0:
        raise ValueError(f"length must be at least the batch's {batch['input_ids'].shape[-1]}")
    values = {"input_ids": pad_token_id, "attention_mask": 0, "labels": IGNORE_INDEX}
    return {k: F.pad(v, (0, extra), value=values[k]) for k, v in batch.items()}  # (B, length)
