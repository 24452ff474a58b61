"""The quizzes' claims about other systems: covered by the ledger, and the ``test`` ones checked.

Every quiz question (prompt, choices and explanations) that names another system holds the anchor of
a ``quiz NN`` entry under "Quizzes" in ``docs/claims.md``. Each ``test_claim_quiz_*`` below checks
its entry (and those naming it) by calling the installed transformers: tiny models built from
configs (nothing is downloaded), seeded, the course tokenizer, transformers' own log messages
captured. No test reads or compares source text.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    BertForMaskedLM,
    BertLMHeadModel,
    BertModel,
    EncoderDecoderConfig,
    ModernBertForMaskedLM,
)
from transformers.loss.loss_utils import ForMaskedLMLoss

from lmlessons.causality import logit_change
from tests._claims import Claim, quiz_lessons, read_ledger, uncovered_quiz
from tests._tiny import (
    VOCAB,
    bert_config,
    modernbert_config,
    seeded,
    transformers_log,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = [
    "The dog chased the ball across the green park.",
    "A cat slept on the warm window sill all afternoon.",
    "Children played in the garden until the sun went down.",
    "The old man read the morning paper by the fire.",
    "Rain fell on the quiet town through the night.",
    "She walked to the market and bought fresh bread.",
]


def _ids(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randint(5, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _moved_positions(model: torch.nn.Module, ids: torch.Tensor, at: int) -> list[int]:
    """The positions whose logits change when the token at ``at`` is replaced
    (``lmlessons.causality.logit_change``)."""
    changes = logit_change(model, ids, at, 5 if int(ids[0, at]) != 5 else 6)  # (T,)
    return changes.nonzero().flatten().tolist()


# --------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("number", quiz_lessons())
def test_every_quiz_question_naming_another_system_is_in_the_ledger(number: str) -> None:
    missing = uncovered_quiz(number, read_ledger())
    assert not missing, "no ledger anchor in:\n" + "\n".join(f"- {q[:160]}" for q in missing)


def test_quiz_coverage_can_fail() -> None:
    assert uncovered_quiz("07", [])  # 07.5 names Liger Kernel and Cut Cross-Entropy
    anchors = [c for c in read_ledger() if c.lesson == "quiz 07"]
    assert anchors and not uncovered_quiz("07", anchors)
    elsewhere = [Claim(c.id, "quiz 06", c.anchor, c.claim, c.evidence) for c in anchors]
    assert uncovered_quiz("07", elsewhere)  # an anchor counts only for its own quiz


# --------------------------------------------------------------------------- 01, 02, 03


def test_claim_quiz_02_formaskedlmloss() -> None:
    logits = torch.randn(2, 100, 7, generator=torch.Generator().manual_seed(0))
    labels = torch.full((2, 100), -100)
    labels[:, :15] = torch.randint(7, (2, 15), generator=torch.Generator().manual_seed(1))
    loss = ForMaskedLMLoss(logits, labels, vocab_size=7)
    nll = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), reduction="none")
    assert torch.allclose(loss, nll.sum() / 30)  # the 30 masked positions, not the 200


# --------------------------------------------------------------------------- 04, 08


def test_claim_quiz_04_is_decoder_causal() -> None:
    ids = _ids((1, 9), seed=3)
    decoder = seeded(BertLMHeadModel, bert_config(is_decoder=True))
    assert _moved_positions(decoder, ids, at=5) == [5, 6, 7, 8]  # nothing before 5 sees it
    with torch.no_grad():
        assert decoder(input_ids=ids, use_cache=True).past_key_values is not None
        bidirectional = seeded(BertLMHeadModel, bert_config())
        assert bidirectional(input_ids=ids, use_cache=True).past_key_values is None
    BertModel(bert_config(is_decoder=True, add_cross_attention=True))  # allowed


def test_claim_quiz_04_cross_attention() -> None:
    with pytest.raises(ValueError, match="decoder model if cross attention is added"):
        BertModel(bert_config(add_cross_attention=True))
    config = EncoderDecoderConfig.from_encoder_decoder_configs(bert_config(), bert_config())
    assert config.decoder.is_decoder and config.decoder.add_cross_attention


def test_claim_quiz_04_same_head(tmp_path) -> None:
    mlm = seeded(BertForMaskedLM, bert_config())
    decoder = seeded(BertLMHeadModel, bert_config(is_decoder=True), seed=1)
    assert type(mlm.cls) is type(decoder.cls) and type(mlm.cls).__name__ == "BertOnlyMLMHead"
    mlm.save_pretrained(tmp_path)
    with transformers_log():
        warm = BertLMHeadModel.from_pretrained(tmp_path, is_decoder=True)
    for name, value in mlm.cls.state_dict().items():  # the MLM head's weights, loaded as they are
        assert torch.equal(warm.cls.state_dict()[name], value), name


# --------------------------------------------------------------------------- 06, 07


def test_claim_quiz_07_modernbert_sparse() -> None:
    config = modernbert_config(
        sparse_prediction=True,
        attn_implementation="eager",
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
    )
    model = seeded(ModernBertForMaskedLM, config)
    ids = _ids((2, 9))
    labels = torch.full((2, 9), -100)
    labels[0, 2], labels[1, 5], labels[1, 7] = ids[0, 2], ids[1, 5], ids[1, 7]
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    assert out.logits.shape == (3, VOCAB)  # the head ran on the 3 masked positions only
    assert torch.allclose(out.loss, F.cross_entropy(out.logits, ids[labels != -100]), atol=1e-6)
