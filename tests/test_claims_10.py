"""Behaviour tests of the claims lesson 10 (fine-tuning on the answer only) makes about
transformers and TRL.

Each ``test_claim_10_*`` checks one ``evidence: test`` entry of ``docs/claims.md`` against the
installed libraries: the course's chat tokenizer, tiny GPT-2 models built from configs, nothing
downloaded. TRL is a test dependency (``requirements-test.txt``); its claims are skipped, with the
reason, where it is not installed, and each ``SFTTrainer`` is built in a temporary folder and never
trained.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _tiny import transformers_log
from transformers import DataCollatorForLanguageModeling

from lmlessons.answer_only import assistant_only_labels, per_token_loss
from lmlessons.course.chat import CHAT_TEMPLATE, chat_tokenizer, encode_example, instruction_set
from lmlessons.course.models import tiny_gpt2
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


def _generation_marks_the_answers(tok) -> bool:
    tokens, masks = _marked(tok)
    return [t for t, m in zip(tokens, masks) if m] == ["animals", "[SEP]", "the", "[SEP]"]


def test_claim_10_generation_mask(chat_tok):
    assert _generation_marks_the_answers(chat_tok)
    # the tags print nothing: the same tokens as without them
    plain = CHAT_TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    assert _marked(chat_tok, plain)[0] == _marked(chat_tok)[0]


def test_claim_10_learn_generation_mask(chat_tok):
    assert _generation_marks_the_answers(chat_tok)


def test_claim_10_summary_generation_mask(chat_tok):
    assert _generation_marks_the_answers(chat_tok)


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


def test_claim_10_collator_pad_eos(chat_tok):
    pad_is_eos = chat_tokenizer()
    pad_is_eos.pad_token = pad_is_eos.eos_token
    features = [
        {"input_ids": encode_example(chat_tok, e)["input_ids"]}
        for e in instruction_set("validation")[:3]
    ]
    labels = DataCollatorForLanguageModeling(pad_is_eos, mlm=False)(features)["labels"]
    eos = chat_tok.eos_token_id
    assert sum(f["input_ids"].count(eos) for f in features) == 3
    assert not (labels == eos).any()  # the real end-of-turn tokens too
    assert int((labels != -100).sum()) == sum(len(f["input_ids"]) - 1 for f in features)


# --------------------------------------------------------------------------- TRL


def _trl() -> Any:
    return pytest.importorskip("trl", reason="TRL is installed by requirements-test.txt")


def _examples() -> list[dict[str, Any]]:
    items = instruction_set("validation")
    return items[:3] + items[-3:]


def _trainer(tok, rows: list[dict[str, Any]], tmp_path, **config: Any):
    trl = _trl()
    import datasets

    config = {"max_length": None, **config}
    args = trl.SFTConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **config)
    return trl.SFTTrainer(
        model=tiny_gpt2(tok, seed=0),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
    )


def _prompt_completion(tok, tmp_path, **config: Any) -> list[dict[str, Any]]:
    rows = [{"prompt": e["prompt"], "completion": e["completion"]} for e in _examples()]
    return list(_trainer(tok, rows, tmp_path, **config).train_dataset)


def _messages(tok, tmp_path, **config: Any) -> list[dict[str, Any]]:
    rows = [{"messages": e["prompt"] + e["completion"]} for e in _examples()]
    return list(_trainer(tok, rows, tmp_path, **config).train_dataset)


def _trl_labels_are_the_courses(tok, tmp_path) -> bool:
    ours = [encode_example(tok, e)["labels"] for e in _examples()]
    completion = [row["labels"] for row in _prompt_completion(tok, tmp_path)]  # the default
    assistant = [row["labels"] for row in _messages(tok, tmp_path, assistant_only_loss=True)]
    return completion == ours == assistant


@pytest.mark.slow
def test_claim_10_trl_two_ways(chat_tok, tmp_path):
    # prompt-completion: completion_only_loss is on by default; off, every token is a target
    default = _prompt_completion(chat_tok, tmp_path)
    assert all(
        row["labels"] == encode_example(chat_tok, e)["labels"]
        for row, e in zip(default, _examples())
    )
    off = _prompt_completion(chat_tok, tmp_path, completion_only_loss=False)
    assert all(row["labels"] == row["input_ids"] for row in off)
    # messages: the assistant mask only with assistant_only_loss=True
    assert all(row["labels"] == row["input_ids"] for row in _messages(chat_tok, tmp_path))


@pytest.mark.slow
def test_claim_10_learn_trl_two_ways(chat_tok, tmp_path):
    assert _trl_labels_are_the_courses(chat_tok, tmp_path)


@pytest.mark.slow
def test_claim_10_trl_same_labels(chat_tok, tmp_path):
    assert _trl_labels_are_the_courses(chat_tok, tmp_path)


@pytest.mark.slow
def test_claim_10_summary_trl_labels(chat_tok, tmp_path):
    assert _trl_labels_are_the_courses(chat_tok, tmp_path)


@pytest.mark.slow
def test_claim_10_trl_pad_eos_keeps_eos(tmp_path):
    tok = chat_tokenizer()
    tok.pad_token = tok.eos_token  # a shared pad and eos token
    trainer = _trainer(
        tok,
        [{"messages": e["prompt"] + e["completion"]} for e in _examples()],
        tmp_path,
        assistant_only_loss=True,
    )
    rows = list(trainer.train_dataset)
    batch = trainer.data_collator(rows)
    eos = tok.eos_token_id
    assert int((batch["labels"] == eos).sum()) == len(rows)  # every end-of-turn token a target


def _trl_per_token(tok, tmp_path) -> bool:
    """TRL's SFTTrainer loss (loss_type="nll") on a padded batch with num_items_in_batch is the
    per-token loss: the sum over the answer tokens divided by the count."""
    trainer = _trainer(
        tok,
        [{"messages": e["prompt"] + e["completion"]} for e in _examples()],
        tmp_path,
        assistant_only_loss=True,
    )
    batch = trainer.data_collator(list(trainer.train_dataset))
    model = trainer.model.eval()
    n = int((batch["labels"][:, 1:] != -100).sum())
    theirs = trainer.compute_loss(model, dict(batch), num_items_in_batch=torch.tensor(n + 3))
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return bool(
        torch.allclose(
            theirs.detach(),
            per_token_loss(logits, batch["labels"], num_items_in_batch=n + 3),
            atol=1e-5,
        )
    )


@pytest.mark.slow
def test_claim_10_per_token_default(chat_tok, tmp_path):
    assert _trl_per_token(chat_tok, tmp_path)


@pytest.mark.slow
def test_claim_10_summary_per_token_default(chat_tok, tmp_path):
    assert _trl_per_token(chat_tok, tmp_path)


@pytest.mark.slow
def test_claim_10_trl_labels_before_packing(chat_tok, tmp_path):
    packed = _messages(chat_tok, tmp_path, assistant_only_loss=True, packing=True, max_length=64)
    ours = [encode_example(chat_tok, e) for e in _examples()]
    assert sorted(t for row in packed for t in row["labels"] if t != -100) == sorted(
        t for row in ours for t in row["labels"] if t != -100
    )
    assert len(packed) < len(ours)  # really packed: fewer rows than conversations


# --------------------------------------------------------------------------- quiz 10


def test_claim_quiz_10_generation_block(chat_tok):
    """Quiz 10.1: tokens are marked only inside a generation block; none without one (and a
    warning is logged)."""
    test_claim_10_no_tags_zero_mask(chat_tok)
    tokens, masks = _marked(chat_tok)
    assert all(t not in ("use", "as") for t, m in zip(tokens, masks) if m)  # no role name marked


def test_claim_quiz_10_collator_pad_eos(chat_tok):
    test_claim_10_collator_pad_eos(chat_tok)
