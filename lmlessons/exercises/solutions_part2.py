"""Reference solutions of the Part II exercises, written to be read (``solution(name)`` shows
them), in the style of :mod:`lmlessons.exercises.solutions`: short, no input validation, one
idea per line, shape comments.

``flatten_documents`` (lesson 09) is transformers' ``DataCollatorWithFlattening`` written out:
the documents in one row, each document's first label replaced by the separator, positions
restarting at 0. (Its default separator is transformers' -100; the package's one spelling of
that number is ``IGNORE_INDEX``.)

``assistant_labels`` (lesson 10) finds each assistant turn without ``{% generation %}`` tags: a
prefix of the conversation renders as a prefix of the tokens, so the turn is what rendering up to
it adds to rendering up to its question with the generation prompt.
"""

from __future__ import annotations

from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX


def flatten_documents(
    docs: list[list[int]], *, separator_id: int = IGNORE_INDEX
) -> dict[str, torch.Tensor]:
    input_ids, labels, position_ids = [], [], []
    for doc in docs:
        input_ids += doc  # no padding, no token between documents
        labels += [separator_id, *doc[1:]]  # nothing learned across the boundary
        position_ids += list(range(len(doc)))  # 0, 1, ... again for every document
    return {
        "input_ids": torch.tensor([input_ids]),  # (1, N)
        "labels": torch.tensor([labels]),  # (1, N)
        "position_ids": torch.tensor([position_ids]),  # (1, N)
    }


def assistant_labels(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages)["input_ids"]
    labels = [IGNORE_INDEX] * len(ids)  # nothing learned, until an assistant turn says otherwise
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        # the prompt up to this turn, with the header the template writes before an answer
        start = len(
            tokenizer.apply_chat_template(messages[:i], add_generation_prompt=True)["input_ids"]
        )
        end = len(tokenizer.apply_chat_template(messages[: i + 1])["input_ids"])  # answer + eos
        labels[start:end] = ids[start:end]
    return labels
