"""Behaviour tests of what lesson 04 says about transformers (ledger: ``docs/claims.md``).

Each ``test_claim_04_*`` checks its ledger entry (and those naming it) by calling the installed
library: tiny models built from configs (nothing is downloaded), seeded, with transformers' own log
messages and warnings captured. No test reads or compares source text.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from _exact import same_tensors
from transformers import (
    BertForPreTraining,
    BertLMHeadModel,
    BertModel,
    EncoderDecoderConfig,
    EncoderDecoderModel,
)
from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss
from transformers.masking_utils import create_causal_mask
from transformers.models.bert import modeling_bert
from transformers.models.encoder_decoder.modeling_encoder_decoder import shift_tokens_right

from lmlessons import clm_loss
from lmlessons.causality import logit_change
from tests._tiny import (
    VOCAB,
    bert_config,
    next_token_ce,
    seeded,
    transformers_log,
)

PAD, START = 0, 2  # pad_token_id of the tiny configs; a decoder start id that is not PAD


def _ids(batch: int = 2, length: int = 10, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)  # (B, T), no pad id


def _lm_head(is_decoder: bool) -> BertLMHeadModel:
    return seeded(BertLMHeadModel, bert_config(is_decoder=is_decoder))


def _logit_change(model: Any, ids: torch.Tensor, position: int) -> torch.Tensor:
    """``lmlessons.causality.logit_change`` of the first row, the token at ``position`` replaced
    by another non-special id: (T,)."""
    other = 3 + (int(ids[0, position]) - 2) % (VOCAB - 3)
    return logit_change(model, ids[:1], position, other)


# --- section 1: the shift, the loss function, the warnings -----------------------------------


def test_claim_04_loss_mapping_fallback() -> None:
    assert not [key for key in LOSS_MAPPING if key in "BertLMHeadModel"]
    with transformers_log() as log:
        model = _lm_head(True)
        loss_function = model.loss_function
    assert model.loss_type is None and loss_function is ForCausalLMLoss
    assert any("ForCausalLMLoss" in m for m in log), log


def test_claim_04_default_loss_message() -> None:
    model, ids = _lm_head(False), _ids()
    with transformers_log() as log, torch.no_grad():
        out = model(input_ids=ids, labels=ids.clone())
    assert any("Using the default loss: `ForCausalLMLoss`" in m for m in log), log
    assert torch.allclose(out.loss, next_token_ce(out.logits, ids), atol=1e-6)


def test_claim_04_standalone_warning() -> None:
    with transformers_log() as without_flag:
        naive = _lm_head(False)
    with transformers_log() as with_flag:
        causal = _lm_head(True)
    wanted = "If you want to use `BertLMHeadModel` as a standalone, add `is_decoder=True.`"
    assert wanted in without_flag, without_flag
    assert not any("standalone" in m for m in with_flag)
    ids, p = _ids(), 6
    assert (_logit_change(causal, ids, p)[:p] == 0).all()  # causal: the future never reaches back
    assert (_logit_change(naive, ids, p)[:p] > 1e-5).all()  # without the flag: it does


def test_claim_04_no_flag_only_warns() -> None:
    model, ids = _lm_head(False), _ids()  # builds, no exception
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids.clone())
    assert torch.isfinite(out.loss)
    assert torch.allclose(out.loss, next_token_ce(out.logits, ids), atol=1e-6)  # shifted as usual
    p = 5
    assert _logit_change(model, ids, p)[p - 1] > 1e-5  # position p - 1 sees its target, token p


# --- section 2: what is_decoder changes ------------------------------------------------------


def test_claim_04_mask_by_is_decoder() -> None:
    original = BertModel._create_attention_masks
    causal_fn = modeling_bert.create_causal_mask
    bidirectional_fn = modeling_bert.create_bidirectional_mask
    for is_decoder in (True, False):
        model = _lm_head(is_decoder)
        with (
            mock.patch.object(
                BertModel, "_create_attention_masks", autospec=True, side_effect=original
            ) as masks,
            mock.patch.object(modeling_bert, "create_causal_mask", wraps=causal_fn) as causal,
            mock.patch.object(
                modeling_bert, "create_bidirectional_mask", wraps=bidirectional_fn
            ) as bidirectional,
            torch.no_grad(),
        ):
            model(input_ids=_ids())
        calls = (masks.call_count, causal.call_count, bidirectional.call_count)
        assert calls == (1, int(is_decoder), int(not is_decoder))


def test_claim_04_flag_adds_no_weight() -> None:
    causal, naive = _lm_head(True).state_dict(), _lm_head(False).state_dict()
    assert {k: v.shape for k, v in causal.items()} == {k: v.shape for k, v in naive.items()}
    assert same_tensors(causal, naive)  # same seed, same weights


# --- section 4: the warm-started encoder-decoder ---------------------------------------------


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[BertForPreTraining, Any]:
    """A tiny BERT (MLM + NSP heads) saved to disk, and an EncoderDecoderModel warm-started
    from it."""
    folder: Path = tmp_path_factory.mktemp("bert")
    bert = seeded(BertForPreTraining, bert_config())
    bert.save_pretrained(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the new cross-attention weights are random
        seq2seq = EncoderDecoderModel.from_encoder_decoder_pretrained(str(folder), str(folder))
    seq2seq.config.decoder_start_token_id = START
    seq2seq.config.pad_token_id = PAD
    return bert, seq2seq.eval()


def _labels() -> torch.Tensor:
    labels = _ids(length=7, seed=2)  # (B, T')
    labels[0, 5:] = -100  # a shorter target, padded
    return labels


def _decoder_call(seq2seq: EncoderDecoderModel, **batch: torch.Tensor) -> tuple[Any, dict]:
    """The output of ``seq2seq(**batch)`` and the keyword arguments its decoder was called with."""
    seen: dict = {}
    keep = seen.update
    hook = seq2seq.decoder.register_forward_pre_hook(lambda m, a, kw: keep(kw), with_kwargs=True)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", FutureWarning)
            out = seq2seq(**batch)
    finally:
        hook.remove()
    return out, seen


def test_claim_04_lmhead_is_the_encdec_decoder(warm: tuple) -> None:
    _, seq2seq = warm
    assert type(seq2seq.decoder) is BertLMHeadModel and type(seq2seq.encoder) is BertModel


def test_claim_04_encdec_implements_warm_start(warm: tuple) -> None:
    bert, seq2seq = warm
    bert_weights, dec_weights = bert.state_dict(), seq2seq.decoder.state_dict()
    new = [k for k in dec_weights if k not in bert_weights]
    copied = [k for k in dec_weights if k in bert_weights]
    assert new and all("crossattention" in k for k in new)  # BERT has no cross-attention
    assert copied and all(torch.equal(dec_weights[k], bert_weights[k]) for k in copied)
    assert seq2seq.decoder.config.is_decoder  # causal self-attention
    ids = _ids()
    hidden = seq2seq.encoder(input_ids=ids).last_hidden_state  # (B, T, H)
    changes = []
    for p in (4, 7):
        changed = ids.clone()
        changed[:, p] = 3 + (changed[:, p] - 2) % (VOCAB - 3)
        with torch.no_grad():
            before = seq2seq.decoder(input_ids=ids, encoder_hidden_states=hidden).logits
            after = seq2seq.decoder(input_ids=changed, encoder_hidden_states=hidden).logits
        changes.append((after - before)[:, :p].abs().max().item())
    assert changes == [0.0, 0.0]


def test_claim_04_encdec_forces_decoder_config(warm: tuple) -> None:
    bert, seq2seq = warm
    assert not bert.config.is_decoder and not bert.config.add_cross_attention  # what was saved
    decoder, encoder = seq2seq.config.decoder, seq2seq.config.encoder
    assert decoder.is_decoder and decoder.add_cross_attention
    assert not encoder.is_decoder and not encoder.add_cross_attention


def test_claim_04_decoder_head_is_mlm_head(warm: tuple) -> None:
    bert, seq2seq = warm
    bert_weights, dec_weights = bert.state_dict(), seq2seq.decoder.state_dict()
    head = [k for k in dec_weights if k.startswith("cls.predictions.")]
    assert {"cls.predictions.decoder.weight", "cls.predictions.transform.dense.weight"} <= set(head)
    assert all(torch.equal(dec_weights[k], bert_weights[k]) for k in head)


def test_claim_04_decoder_inputs_shift_right(warm: tuple) -> None:
    _, seq2seq = warm
    labels = _labels()
    _, seen = _decoder_call(seq2seq, input_ids=_ids(), labels=labels)
    by_hand = torch.cat([torch.full_like(labels[:, :1], START), labels[:, :-1]], dim=1)  # (B, T')
    by_hand[by_hand == -100] = PAD
    assert torch.equal(seen["input_ids"], by_hand)
    assert torch.equal(seen["input_ids"], shift_tokens_right(labels, PAD, START))


def test_claim_04_encdec_loss_outside_decoder(warm: tuple) -> None:
    _, seq2seq = warm
    labels = _labels()
    out, seen = _decoder_call(seq2seq, input_ids=_ids(), labels=labels)
    assert seen.get("labels") is None  # the decoder never sees the labels
    plain = F.cross_entropy(out.logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    assert torch.allclose(out.loss, plain, atol=1e-6)  # one cross-entropy on the unshifted labels
    assert not torch.allclose(out.loss, clm_loss(out.logits, labels), atol=1e-3)  # no second shift


def test_claim_04_v412_warning(warm: tuple) -> None:
    _, seq2seq = warm
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        seq2seq(input_ids=_ids(), labels=_labels())
    texts = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert any("v4.12.0" in t and "rather than in the decoder itself" in t for t in texts), texts


def test_claim_04_source_files() -> None:
    bert, encdec = "transformers.models.bert.modeling_bert", "transformers.models.encoder_decoder"
    assert BertLMHeadModel.__module__ == bert and BertModel.__module__ == bert
    assert callable(BertModel._create_attention_masks)
    assert create_causal_mask.__module__ == "transformers.masking_utils"
    assert shift_tokens_right.__module__ == EncoderDecoderModel.__module__
    assert EncoderDecoderModel.__module__ == f"{encdec}.modeling_encoder_decoder"
    assert EncoderDecoderConfig.__module__ == f"{encdec}.configuration_encoder_decoder"
