"""Oracle: TRL's SFTTrainer prepares the same answer-only labels as the course, and its collator
packs them as ``flatten_documents`` does.

TRL is a course dependency (``requirements.txt``): the tests are skipped, with the reason, where
it is not installed. The ``SFTTrainer``s come from the session fixture ``sft_trainer``
(``tests/conftest.py``): tiny GPT-2s, never trained; only their dataset preparation and their
collators run.
"""

from __future__ import annotations

import pytest
import torch

from lmlessons.answer_only import completion_only_labels
from lmlessons.course.chat import encode_example
from lmlessons.packing import flatten_documents

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_trl_completion_only_loss_gives_the_course_labels(chat_tok, sft_examples, sft_trainer):
    """A prompt-completion dataset: TRL masks the prompt by default (``completion_only_loss``
    left at None)."""
    prepared = list(sft_trainer("prompt_completion").train_dataset)
    assert len(prepared) == len(sft_examples)
    for theirs, example in zip(prepared, sft_examples):
        prompt = chat_tok.apply_chat_template(example["prompt"], add_generation_prompt=True)
        full = encode_example(chat_tok, example)
        ours = completion_only_labels(
            prompt["input_ids"], full["input_ids"][len(prompt["input_ids"]) :]
        )
        assert theirs["input_ids"] == ours["input_ids"].tolist()
        assert theirs["labels"] == ours["labels"].tolist() == full["labels"]


def test_trl_assistant_only_loss_gives_the_course_labels(chat_tok, sft_examples, sft_trainer):
    prepared = list(sft_trainer("messages", assistant_only_loss=True).train_dataset)
    assert len(prepared) == len(sft_examples)
    for theirs, example in zip(prepared, sft_examples):
        ours = encode_example(chat_tok, example, train_on="assistant only")
        assert theirs["input_ids"] == ours["input_ids"]
        assert theirs["labels"] == ours["labels"]
        assert theirs["labels"][-1] == chat_tok.eos_token_id  # the end of turn is a target


def test_trl_without_a_mask_trains_on_everything(chat_tok, sft_examples, sft_trainer):
    """A messages dataset without ``assistant_only_loss``, and a prompt-completion dataset with
    ``completion_only_loss=False``: every token is a target."""
    for trainer in (
        sft_trainer("messages"),
        sft_trainer("prompt_completion", completion_only_loss=False),
    ):
        prepared = list(trainer.train_dataset)
        assert len(prepared) == len(sft_examples)
        for theirs, example in zip(prepared, sft_examples):
            ours = encode_example(chat_tok, example, train_on="everything")
            assert theirs["input_ids"] == ours["input_ids"]
            assert theirs["labels"] == ours["labels"]


def test_trl_packing_keeps_the_assistant_masks(chat_tok, sft_examples, sft_trainer):
    """With packing=True the labels are built before packing (the fix of TRL #3728): cut at its
    ``seq_lengths``, each packed row holds whole conversations, each with the course's answer-only
    labels position by position."""
    trainer = sft_trainer("messages", assistant_only_loss=True, packing=True, max_length=64)
    packed = list(trainer.train_dataset)
    assert len(packed) < len(sft_examples)  # really packed: fewer rows than conversations
    theirs = []
    for row in packed:
        start = 0
        for n in row["seq_lengths"]:
            ids, labels = row["input_ids"][start : start + n], row["labels"][start : start + n]
            theirs.append((tuple(ids), tuple(labels)))
            start += n
        assert start == len(row["input_ids"])
    ours = [encode_example(chat_tok, e) for e in sft_examples]
    assert sorted(theirs) == sorted((tuple(r["input_ids"]), tuple(r["labels"])) for r in ours)


def _trl_collator(trl, tok, **options):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id, **options)


def test_trl_padding_free_collator_flattens_like_the_course(trl, chat_tok, sft_examples):
    features = [encode_example(chat_tok, e) for e in sft_examples]
    batch = _trl_collator(trl, chat_tok, padding_free=True)(features)
    ours = flatten_documents(
        [f["input_ids"] for f in features], labels=[f["labels"] for f in features]
    )
    for key in ("input_ids", "labels", "position_ids"):
        assert torch.equal(batch[key], ours[key]), key


def test_trl_padded_collator_pads_labels_with_minus_100(trl, chat_tok, sft_examples):
    features = [encode_example(chat_tok, e) for e in sft_examples]
    batch = _trl_collator(trl, chat_tok)(features)
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        assert batch["labels"][row, :n].tolist() == f["labels"]
        assert (batch["labels"][row, n:] == -100).all()
        assert batch["attention_mask"][row, n:].sum() == 0
