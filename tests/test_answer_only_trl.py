"""Oracle: TRL's SFTTrainer prepares the same answer-only labels as the course, and its collator
packs them as ``flatten_documents`` does.

TRL is a test dependency (``requirements-test.txt``), not a course one: the module is skipped,
with the reason, where it is not installed. Each ``SFTTrainer`` is built on a tiny GPT-2 from a
config in a temporary folder and never trained: only its dataset preparation and its collator run.
"""

from __future__ import annotations

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is installed by requirements-test.txt")
datasets = pytest.importorskip("datasets", reason="TRL needs datasets")

from trl.trainer.sft_trainer import DataCollatorForLanguageModeling  # noqa: E402

from lmlessons.answer_only import completion_only_labels  # noqa: E402
from lmlessons.course.chat import encode_example, instruction_set  # noqa: E402
from lmlessons.course.models import tiny_gpt2  # noqa: E402
from lmlessons.packing import flatten_documents  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

N_EXAMPLES = 8


@pytest.fixture(scope="module")
def examples():
    """Held-out questions of both tasks."""
    items = instruction_set("validation")
    return items[:4] + items[-4:]


def _prepared(tok, rows: list[dict], tmp_path, **config) -> list[dict]:
    """The training examples as TRL's SFTTrainer prepares them (tokenized, with labels)."""
    config = {"max_length": None, **config}
    args = trl.SFTConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **config)
    trainer = trl.SFTTrainer(
        model=tiny_gpt2(tok, seed=0),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
    )
    return list(trainer.train_dataset)


def test_trl_completion_only_loss_gives_the_course_labels(chat_tok, examples, tmp_path):
    rows = [{"prompt": e["prompt"], "completion": e["completion"]} for e in examples]
    prepared = _prepared(chat_tok, rows, tmp_path, completion_only_loss=True)
    for theirs, example in zip(prepared, examples):
        prompt = chat_tok.apply_chat_template(example["prompt"], add_generation_prompt=True)
        full = encode_example(chat_tok, example)
        ours = completion_only_labels(
            prompt["input_ids"], full["input_ids"][len(prompt["input_ids"]) :]
        )
        assert theirs["input_ids"] == ours["input_ids"].tolist()
        assert theirs["labels"] == ours["labels"].tolist() == full["labels"]


def test_trl_assistant_only_loss_gives_the_course_labels(chat_tok, examples, tmp_path):
    rows = [{"messages": e["prompt"] + e["completion"]} for e in examples]
    prepared = _prepared(chat_tok, rows, tmp_path, assistant_only_loss=True)
    for theirs, example in zip(prepared, examples):
        ours = encode_example(chat_tok, example, target="answer")
        assert theirs["input_ids"] == ours["input_ids"]
        assert theirs["labels"] == ours["labels"]
        assert theirs["labels"][-1] == chat_tok.eos_token_id  # the end of turn is a target


def test_trl_without_a_mask_trains_on_everything(chat_tok, examples, tmp_path):
    rows = [{"messages": e["prompt"] + e["completion"]} for e in examples]
    prepared = _prepared(chat_tok, rows, tmp_path)
    for theirs, example in zip(prepared, examples):
        assert theirs["labels"] == encode_example(chat_tok, example, target="everything")["labels"]


def test_trl_packing_keeps_the_assistant_masks(chat_tok, examples, tmp_path):
    """With packing=True the labels are built before packing (the fix of TRL #3728): the packed
    rows hold exactly the answer targets of the examples, no prompt token."""
    rows = [{"messages": e["prompt"] + e["completion"]} for e in examples]
    packed = _prepared(
        chat_tok, rows, tmp_path, assistant_only_loss=True, packing=True, max_length=64
    )
    ours = [encode_example(chat_tok, e) for e in examples]
    theirs_targets = sorted(t for row in packed for t in row["labels"] if t != -100)
    ours_targets = sorted(t for row in ours for t in row["labels"] if t != -100)
    assert theirs_targets == ours_targets
    assert sum(len(row["input_ids"]) for row in packed) == sum(len(r["input_ids"]) for r in ours)


def test_trl_padding_free_collator_flattens_like_the_course(chat_tok, examples):
    features = [encode_example(chat_tok, e) for e in examples]
    batch = DataCollatorForLanguageModeling(pad_token_id=chat_tok.pad_token_id, padding_free=True)(
        features
    )
    ours = flatten_documents(
        [f["input_ids"] for f in features], labels=[f["labels"] for f in features]
    )
    for key in ("input_ids", "labels", "position_ids"):
        assert torch.equal(batch[key], ours[key]), key


def test_trl_padded_collator_pads_labels_with_minus_100(chat_tok, examples):
    features = [encode_example(chat_tok, e) for e in examples]
    batch = DataCollatorForLanguageModeling(pad_token_id=chat_tok.pad_token_id)(features)
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        assert batch["labels"][row, :n].tolist() == f["labels"]
        assert (batch["labels"][row, n:] == -100).all() and batch["attention_mask"][
            row, n:
        ].sum() == 0
