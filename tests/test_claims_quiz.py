"""The quizzes' claims about other systems: covered by the ledger, and the ``test`` ones checked.

Every quiz question (prompt, choices and explanations) that names another system holds the anchor
of a ``quiz NN`` entry under "Quizzes" in ``docs/claims.md``. Each ``test_claim_quiz_*`` below
checks one such entry by calling the installed transformers: tiny models built from configs
(nothing is downloaded), seeded, the course tokenizer, transformers' own log messages captured.
No test reads or compares source text.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    BertForMaskedLM,
    BertForPreTraining,
    BertLMHeadModel,
    BertModel,
    DataCollatorForLanguageModeling,
    EncoderDecoderConfig,
    EncoderDecoderModel,
    GPT2LMHeadModel,
    ModernBertForMaskedLM,
)
from transformers.loss.loss_utils import ForCausalLMLoss, ForMaskedLMLoss

from lmlessons.course.tokenizer import load_tokenizer
from tests._claims import Claim, quiz_lessons, read_ledger, uncovered_quiz
from tests._tiny import (
    VOCAB,
    bert_config,
    gpt2_config,
    modernbert_config,
    next_token_ce,
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
    """The positions whose logits change when the token at ``at`` is replaced."""
    other = ids.clone()
    other[0, at] = 5 if int(ids[0, at]) != 5 else 6
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=other).logits
    return [t for t in range(ids.size(1)) if not torch.equal(a[0, t], b[0, t])]


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


def test_claim_quiz_01_collator_seed_zero() -> None:
    tok = load_tokenizer()
    batch = [tok(s) for s in SENTENCES]

    def masked(seed: int, global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        collate = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=seed)
        return collate(batch)["labels"]

    assert torch.equal(masked(0, 1), masked(0, 2))  # seed=0 decides, not the global seed
    assert not torch.equal(masked(0, 1), masked(1, 1))


def test_claim_quiz_02_formaskedlmloss() -> None:
    logits = torch.randn(2, 100, 7, generator=torch.Generator().manual_seed(0))
    labels = torch.full((2, 100), -100)
    labels[:, :15] = torch.randint(7, (2, 15), generator=torch.Generator().manual_seed(1))
    loss = ForMaskedLMLoss(logits, labels, vocab_size=7)
    nll = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), reduction="none")
    assert torch.allclose(loss, nll.sum() / 30)  # the 30 masked positions, not the 200


def test_claim_quiz_03_causal_lm_shift() -> None:
    ids = _ids((2, 10))
    for model in (
        seeded(GPT2LMHeadModel, gpt2_config()),
        seeded(BertLMHeadModel, bert_config(is_decoder=True)),
    ):
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids.clone())
        assert torch.allclose(out.loss, next_token_ce(out.logits, ids), atol=1e-6)
    logits = torch.randn(2, 10, VOCAB, generator=torch.Generator().manual_seed(2))
    padded = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], dim=1)  # labels[..., 1:], -100
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), padded.reshape(-1))
    assert torch.allclose(ForCausalLMLoss(logits, ids, vocab_size=VOCAB), expected)


def test_claim_quiz_03_collator_pad_eos() -> None:
    tok = load_tokenizer()
    tok.pad_token = tok.sep_token  # EOS as the pad token
    batch = DataCollatorForLanguageModeling(tok, mlm=False)([tok(s) for s in SENTENCES[:2]])
    ids, labels = batch["input_ids"], batch["labels"]
    eos = ids == tok.sep_token_id
    assert torch.equal(labels[~eos], ids[~eos])  # a copy, not shifted
    assert (labels[eos] == -100).all() and batch["attention_mask"][eos].sum() == 2  # real EOS


# --------------------------------------------------------------------------- 04, 08


def test_claim_quiz_04_is_decoder_causal() -> None:
    ids = _ids((1, 8))
    decoder = seeded(BertLMHeadModel, bert_config(is_decoder=True))
    assert _moved_positions(decoder, ids, at=4) == [4, 5, 6, 7]  # nothing before 4 sees it
    with torch.no_grad():
        assert decoder(input_ids=ids, use_cache=True).past_key_values is not None
        bidirectional = seeded(BertLMHeadModel, bert_config())
        assert bidirectional(input_ids=ids, use_cache=True).past_key_values is None
    BertModel(bert_config(is_decoder=True, add_cross_attention=True))  # allowed


def test_claim_quiz_04_shift_regardless() -> None:
    ids = _ids((2, 9))
    model = seeded(BertLMHeadModel, bert_config())  # is_decoder=False
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    assert torch.allclose(out.loss, next_token_ce(out.logits, ids), atol=1e-6)


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


def test_claim_quiz_04_standalone_warning() -> None:
    ids = _ids((1, 6))
    with transformers_log() as messages:
        model = seeded(BertLMHeadModel, bert_config())
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss  # runs: no exception
    wanted = "If you want to use `BertLMHeadModel` as a standalone, add `is_decoder=True.`"
    assert wanted in messages and torch.isfinite(loss)


def test_claim_quiz_04_prefix_only() -> None:
    decoder = seeded(BertLMHeadModel, bert_config(is_decoder=True))
    assert _moved_positions(decoder, _ids((1, 9), seed=3), at=5) == [5, 6, 7, 8]


def test_claim_quiz_04_encoder_decoder_labels() -> None:
    with transformers_log():
        model = EncoderDecoderModel(
            encoder=seeded(BertModel, bert_config()),
            decoder=seeded(BertLMHeadModel, bert_config(is_decoder=True, add_cross_attention=True)),
        ).eval()
    model.config.decoder_start_token_id, model.config.pad_token_id = 2, 0
    source, labels = _ids((2, 7)), _ids((2, 6), seed=1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # its note on the pre-4.12 behaviour
        out = model(input_ids=source, labels=labels)
        start = torch.full((2, 1), 2)
        shifted = torch.cat([start, labels[:, :-1]], dim=1)  # shift_tokens_right
        again = model(input_ids=source, decoder_input_ids=shifted)
    assert torch.equal(out.logits, again.logits)
    unshifted = F.cross_entropy(out.logits.reshape(-1, VOCAB), labels.reshape(-1))
    assert torch.allclose(out.loss, unshifted, atol=1e-6)  # one cross-entropy, no second shift


def test_claim_quiz_08_bert_lm_head_leak() -> None:
    with transformers_log():
        leaky = seeded(BertLMHeadModel, bert_config())  # no is_decoder=True
    assert {0, 1, 2, 3} <= set(_moved_positions(leaky, _ids((1, 8)), at=4))  # 3 reads token 4


# --------------------------------------------------------------------------- 06, 07


def _pretraining_outputs() -> tuple[torch.Tensor, ...]:
    model = seeded(BertForPreTraining, bert_config())
    g = torch.Generator().manual_seed(0)
    ids = _ids((8, 12))
    labels = torch.where(torch.rand(8, 12, generator=g) < 0.3, ids, -100)
    nsp = torch.randint(2, (8,), generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, next_sentence_label=nsp)
        mlm_only = model(input_ids=ids, labels=labels).loss
    return out.loss, out.prediction_logits, out.seq_relationship_logits, labels, nsp, mlm_only


def test_claim_quiz_06_bert_pretraining_sum() -> None:
    loss, mlm_logits, nsp_logits, labels, nsp, _ = _pretraining_outputs()
    mlm = F.cross_entropy(mlm_logits.reshape(-1, VOCAB), labels.reshape(-1))
    assert torch.allclose(loss, mlm + F.cross_entropy(nsp_logits, nsp), atol=1e-6)


def test_claim_quiz_06_needs_both_labels() -> None:
    *_, mlm_only = _pretraining_outputs()
    assert mlm_only is None


def test_claim_quiz_06_token_weights() -> None:
    loss, mlm_logits, nsp_logits, labels, nsp, _ = _pretraining_outputs()
    token_nll = F.cross_entropy(mlm_logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none")
    pair_nll = F.cross_entropy(nsp_logits, nsp, reduction="none")
    n_masked = int((labels != -100).sum())
    weighted = token_nll.sum() / n_masked + pair_nll.sum() / len(nsp)  # 1/n_masked and 1/B
    assert torch.allclose(loss, weighted, atol=1e-6) and n_masked != len(nsp)


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
