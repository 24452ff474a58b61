"""Behaviour tests of the claims lesson 10 (fine-tuning on the answer only) makes about
transformers and TRL.

Each ``test_claim_10_*`` checks its entry of ``docs/claims.md`` (and those that name it) against the
installed libraries: the course's chat tokenizer, tiny GPT-2 models built from configs, nothing
downloaded. TRL is a course dependency (``requirements.txt``); its claims are skipped, with the
reason, where it is not installed, and its ``SFTTrainer``s come from the session fixture
``sft_trainer`` (``tests/conftest.py``), shared with ``tests/test_answer_only_trl.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _tiny import transformers_log

from lmlessons.answer_only import assistant_only_labels, per_token_mean_loss
from lmlessons.course.chat import CHAT_TEMPLATE, chat_tokenizer
from lmlessons.exercises.check_answer_only import ChatTokenizer, _cases, _expected

CONVERSATION = [
    {"role": "user", "content": "Which topic? The dog chased the ball."},
    {"role": "assistant", "content": "animals"},
    {"role": "user", "content": "First word? The sea was calm."},
    {"role": "assistant", "content": "the"},
]


def _marked(tok, template: str | None = None) -> tuple[list[str], list[int]]:
    """(tokens, assistant_masks) of the conversation under ``template`` (default: the course's)."""
    out = tok.apply_chat_template(
        CONVERSATION, chat_template=template, return_dict=True, return_assistant_tokens_mask=True
    )
    return tok.convert_ids_to_tokens(out["input_ids"]), out["assistant_masks"]


def test_claim_10_generation_mask(chat_tok):
    tokens, masks = _marked(chat_tok)
    assert [t for t, m in zip(tokens, masks) if m] == ["animals", "[SEP]", "the", "[SEP]"]
    # the tags print nothing: the same tokens as without them
    plain = CHAT_TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    assert _marked(chat_tok, plain)[0] == tokens


def test_claim_10_no_tags_zero_mask(chat_tok):
    plain = CHAT_TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    with transformers_log() as log:
        tokens, masks = _marked(chat_tok, plain)
    assert set(masks) == {0} and len(masks) == len(tokens)
    assert any("generation" in message for message in log), log


def test_claim_10_space_marks_to_end(chat_tok):
    spaced = CHAT_TEMPLATE.replace(
        "{{ eos_token }}{% endgeneration %}", "{% endgeneration %}{{ eos_token }}"
    )
    tokens, masks = _marked(chat_tok, spaced)
    first = tokens.index("animals")
    assert masks == [0] * first + [1] * (len(tokens) - first)  # up to the end, the user turn too
    closed = CHAT_TEMPLATE.replace(
        "{{ message['content'] }} {{ eos_token }}{% endgeneration %}",
        "{{ message['content'] }}{% endgeneration %} {{ eos_token }}",
    )
    tokens, masks = _marked(chat_tok, closed)  # a block ending on a token: exactly the answers
    assert [t for t, m in zip(tokens, masks) if m] == ["animals", "the"]


def test_claim_10_checker_uses_transformers_mask():
    tokenizer = ChatTokenizer()
    reference = chat_tokenizer()
    for case in _cases(tokenizer)[:4]:
        out = reference.apply_chat_template(
            case.args[1], return_dict=True, return_assistant_tokens_mask=True
        )
        labels = assistant_only_labels(out["input_ids"], out["assistant_masks"]).tolist()
        assert _expected(case.args[1]) == (out["input_ids"], labels)
        assert (
            sum(
                tokenizer.apply_chat_template(
                    case.args[1], return_dict=True, return_assistant_tokens_mask=True
                )["assistant_masks"]
            )
            == 0
        )


# --------------------------------------------------------------------------- TRL


@pytest.mark.slow
def test_claim_10_trl_pad_eos_keeps_eos(sft_trainer):
    trainer = sft_trainer("messages", pad_is_eos=True, assistant_only_loss=True)
    tok = trainer.processing_class
    assert tok.pad_token_id == tok.eos_token_id  # a shared pad and eos token
    rows = list(trainer.train_dataset)
    batch = trainer.data_collator(rows)
    eos = tok.eos_token_id
    assert int((batch["labels"] == eos).sum()) == len(rows)  # every end-of-turn token a target


@pytest.mark.slow
def test_claim_10_per_token_default(sft_trainer):
    """TRL's SFTTrainer loss (loss_type="nll") on a padded batch with num_items_in_batch is the
    per-token loss: the sum over the answer tokens divided by the count."""
    trainer = sft_trainer("messages", assistant_only_loss=True)
    assert trainer.args.loss_type == "nll"  # the default
    batch = trainer.data_collator(list(trainer.train_dataset))
    model = trainer.model.eval()
    n = int((batch["labels"][:, 1:] != -100).sum()) + 3  # any count: the loss divides by it
    theirs = trainer.compute_loss(model, dict(batch), num_items_in_batch=torch.tensor(n))
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ours = per_token_mean_loss(logits, batch["labels"], num_items_in_batch=n)
    assert torch.allclose(theirs.detach(), ours, atol=1e-5)


# ------------------------------------------------------- TRL's SFTTrainer by default (section 8)

TRL_TEMPLATES = "chat_templates"  # the folder of chat templates TRL ships, inside the trl package


def _labels(trainer) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of every prepared row."""
    return [(row["input_ids"], row["labels"]) for row in trainer.train_dataset]


@pytest.mark.slow
def test_claim_10_trl_default_every_token(trl, sft_trainer, tmp_path):
    assert trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True).assistant_only_loss is False
    rows = _labels(sft_trainer("messages"))
    assert rows and all(labels == ids for ids, labels in rows)


@pytest.mark.slow
def test_claim_10_trl_masks_intersected(sft_trainer):
    """With a prompt-completion dataset and assistant_only_loss=True, a target must be in both
    masks: of a two-answer conversation, only the last answer (and its [SEP]) is trained."""
    import datasets

    trainer = sft_trainer("prompt_completion", assistant_only_loss=True)
    two_turns = [
        {
            "prompt": CONVERSATION[:3],
            "completion": CONVERSATION[3:],
        }
    ]
    prepared = trainer._prepare_dataset(
        datasets.Dataset.from_list(two_turns),
        trainer.processing_class,
        trainer.args,
        False,
        None,
        "train",
    )
    [row] = list(prepared)
    tok = trainer.processing_class
    targets = tok.convert_ids_to_tokens([i for i in row["labels"] if i != -100])
    assert targets == ["the", "[SEP]"]  # the first answer, though the assistant's, is not a target


@pytest.mark.slow
def test_claim_10_trl_swaps_training_template(sft_trainer):
    """A template without generation tags that TRL knows (its own copy of Qwen3's) is replaced,
    for assistant_only_loss=True, by TRL's training template, which has the tags."""
    import trl as trl_module

    folder = Path(trl_module.__file__).parent / TRL_TEMPLATES
    trainer = sft_trainer(
        "messages", assistant_only_loss=True, chat_template_path=str(folder / "qwen3.jinja")
    )
    original = (folder / "qwen3.jinja").read_text(encoding="utf-8")
    assert trainer.processing_class.chat_template == original
    assert "{% generation %}" not in original
    assert trainer.chat_template == (folder / "qwen3_training.jinja").read_text(encoding="utf-8")
    assert "generation" in trainer.chat_template
    assert all(any(label != -100 for label in labels) for _, labels in _labels(trainer))


@pytest.mark.slow
def test_claim_10_trl_warns_eos_outside_mask(sft_trainer, tmp_path_factory, caplog):
    closed = CHAT_TEMPLATE.replace(
        "{{ message['content'] }} {{ eos_token }}{% endgeneration %}",
        "{{ message['content'] }}{% endgeneration %} {{ eos_token }}",
    )
    path = tmp_path_factory.mktemp("closed") / "closed.jinja"
    path.write_text(closed, encoding="utf-8")
    with caplog.at_level("WARNING"):
        trainer = sft_trainer("messages", assistant_only_loss=True, chat_template_path=str(path))
    assert any("end-of-turn token" in r.getMessage() for r in caplog.records), caplog.text
    eos = trainer.processing_class.eos_token_id
    assert all(eos not in labels for _, labels in _labels(trainer))  # never trained to stop


@pytest.mark.slow
def test_claim_10_trl_max_length_default(trl, sft_trainer, tmp_path):
    assert trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True).max_length == 1024
    rows = _labels(sft_trainer("messages", max_length=16))
    assert rows and all(len(ids) == len(labels) <= 16 for ids, labels in rows)
    assert max(len(ids) for ids, _ in _labels(sft_trainer("messages"))) > 16  # it did cut


@pytest.mark.slow
def test_claim_10_trl_drops_examples_without_targets(sft_trainer, sft_examples):
    """Truncated to fewer tokens than its prompt, a prompt-completion example has no target left
    and is dropped from the prepared dataset."""
    full = _labels(sft_trainer("prompt_completion"))
    starts = [labels.index(next(i for i in labels if i != -100)) for _, labels in full]
    cut = sorted(starts)[len(starts) // 2]  # about half the prompts are at least this long
    kept = _labels(sft_trainer("prompt_completion", max_length=cut))
    assert len(kept) == sum(s < cut for s in starts) < len(full)
    assert all(any(label != -100 for label in labels) for _, labels in kept)


@pytest.mark.slow
def test_claim_10_trl_packing_bfd_padding_free(sft_trainer):
    trainer = sft_trainer("messages", assistant_only_loss=True, packing=True, max_length=64)
    assert trainer.args.packing_strategy == "bfd" and trainer.padding_free
    batch = trainer.data_collator(list(trainer.train_dataset)[:2])
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1  # one row
    assert int((batch["position_ids"] == 0).sum()) > 2  # positions restart per conversation


@pytest.mark.slow
def test_claim_10_trl_unknown_template_raises(sft_trainer, tmp_path_factory):
    plain = CHAT_TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    path = tmp_path_factory.mktemp("plain") / "plain.jinja"
    path.write_text(plain, encoding="utf-8")
    with pytest.raises(ValueError, match="not training-compatible"):
        sft_trainer("messages", assistant_only_loss=True, chat_template_path=str(path))


THINKING = [
    {"role": "user", "content": "Which topic? The dog barked."},
    {"role": "assistant", "content": "<think>a dog barks</think>animals"},
    {"role": "user", "content": "First word? The sea was calm."},
    {"role": "assistant", "content": "<think>it starts with the</think>the"},
]


def _is_prefix(tok, template: str) -> bool:
    """Do the tokens of the first two turns start the tokens of all four?"""
    short = tok.apply_chat_template(THINKING[:2], chat_template=template)["input_ids"]
    full = tok.apply_chat_template(THINKING, chat_template=template)["input_ids"]
    return full[: len(short)] == short


def test_claim_10_thinking_template_breaks_prefix(chat_tok):
    """Qwen3's template (TRL's copy) drops the reasoning of every answer but the last: a prefix of
    the conversation no longer renders as a prefix of the tokens. TRL's training template for it
    keeps every reasoning block, and the prefix property comes back."""
    trl_module = pytest.importorskip("trl", reason="TRL is a course dependency (requirements.txt)")
    folder = Path(trl_module.__file__).parent / TRL_TEMPLATES
    original = (folder / "qwen3.jinja").read_text(encoding="utf-8")
    training = (folder / "qwen3_training.jinja").read_text(encoding="utf-8")
    assert not _is_prefix(chat_tok, original)
    assert _is_prefix(chat_tok, training)
    assert _is_prefix(chat_tok, CHAT_TEMPLATE)  # the course template
