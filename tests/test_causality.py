"""lmlessons.causality: the causal mask, measured attention, the future-token probe and the
prefix-only loss, on tiny GPT-2 and BertLMHeadModel (is_decoder True / False)."""

from __future__ import annotations

import pytest
import torch
from _tiny import VOCAB, bert_config, gpt2_config, seeded
from transformers import BertLMHeadModel, GPT2LMHeadModel
from transformers import logging as hf_logging

from lmlessons import clm_loss
from lmlessons.causality import attention_map, causal_mask, logit_change, prefix_loss

hf_logging.set_verbosity_error()  # BertLMHeadModel(is_decoder=False) warns on purpose


def _bert(is_decoder: bool, seed: int = 0) -> BertLMHeadModel:
    return seeded(BertLMHeadModel, bert_config(is_decoder=is_decoder), seed)


def _gpt2(seed: int = 0) -> GPT2LMHeadModel:
    return seeded(GPT2LMHeadModel, gpt2_config(), seed)


def _ids(b: int = 1, t: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


def test_causal_mask_is_lower_triangle():
    m = causal_mask(5)
    assert m.dtype == torch.bool and m.shape == (5, 5)
    for i in range(5):
        for j in range(5):
            assert bool(m[i, j]) == (j <= i)
    with pytest.raises(ValueError, match="seq_len"):
        causal_mask(0)
    with pytest.raises(TypeError, match="seq_len"):
        causal_mask(2.0)


@pytest.mark.parametrize("make", [lambda: _bert(True), _gpt2], ids=["bert-decoder", "gpt2"])
def test_attention_of_causal_models_is_exactly_zero_above_the_diagonal(make):
    model = make()
    ids = _ids()[0]
    for layer in (0, 1, None):
        a = attention_map(model, ids, layer=layer)  # (T, T)
        assert a.shape == (9, 9)
        assert torch.allclose(a.sum(-1), torch.ones(9), atol=1e-5)
        assert bool((a.triu(1) == 0).all()), "a causal model must give exactly 0 to future keys"
        assert bool((a[causal_mask(9)] > 0).all())


def test_attention_of_bert_without_is_decoder_sees_everything():
    a = attention_map(_bert(False), _ids())
    assert bool((a > 0).all())
    assert float(a.triu(1).sum()) > 1.0


def test_attention_map_respects_padding_and_validates():
    model = _bert(True)
    ids = _ids()[0]
    mask = torch.ones(9, dtype=torch.long)
    mask[6:] = 0
    a = attention_map(model, ids, attention_mask=mask)
    assert bool((a[:, 6:][:6] == 0).all())  # real tokens never attend to padding
    with pytest.raises(ValueError, match="layer"):
        attention_map(model, ids, layer=5)
    with pytest.raises(ValueError, match="one sequence"):
        attention_map(model, _ids(b=2))
    with pytest.raises(TypeError, match="input_ids"):
        attention_map(model, ids.float())
    sdpa = seeded(BertLMHeadModel, bert_config(is_decoder=True, attn_implementation="sdpa"))
    with pytest.raises(ValueError, match="eager"):
        attention_map(sdpa, ids)


@pytest.mark.parametrize("make", [lambda: _bert(True), _gpt2], ids=["bert-decoder", "gpt2"])
@pytest.mark.parametrize("position", [0, 4, 8])
def test_future_token_leaves_earlier_logits_unchanged_in_causal_models(make, position):
    model = make()
    ids = _ids()
    new = 5 if int(ids[0, position]) != 5 else 6
    change = logit_change(model, ids, position, new)  # (T,)
    assert change.shape == (9,)
    assert float(change[:position].sum()) < 1e-6
    assert float(change[position]) > 1e-3  # the replaced token itself changes its own logits


@pytest.mark.parametrize("position", [3, 8])
def test_future_token_moves_earlier_logits_without_is_decoder(position):
    ids = _ids()
    change = logit_change(_bert(False), ids, position, 5 if int(ids[0, position]) != 5 else 6)
    assert bool((change[:position] > 1e-4).all())


def test_same_weights_only_the_mask_differs():
    causal, leaky = _bert(True), _bert(False)
    assert causal.state_dict().keys() == leaky.state_dict().keys()
    leaky.load_state_dict(causal.state_dict())
    ids = _ids()
    # position 0 sees only itself when causal; with is_decoder=False it sees all -> different
    assert not torch.allclose(causal(input_ids=ids).logits[0, 0], leaky(input_ids=ids).logits[0, 0])
    # the last position sees everything in both: identical logits in the first layer's view
    a_c, a_l = attention_map(causal, ids), attention_map(leaky, ids)
    assert torch.allclose(a_c[-1], a_l[-1], atol=1e-6)


def test_logit_change_validates():
    model, ids = _gpt2(), _ids()
    with pytest.raises(ValueError, match="position"):
        logit_change(model, ids, 9, 5)
    with pytest.raises(ValueError, match="replacement_id must differ"):
        logit_change(model, ids, 2, int(ids[0, 2]))
    with pytest.raises(TypeError, match="model"):
        logit_change("gpt2", ids, 2, 5)


@pytest.mark.parametrize("make", [lambda: _bert(True), _gpt2], ids=["bert-decoder", "gpt2"])
def test_prefix_loss_equals_the_one_pass_loss_for_causal_models(make):
    model = make()
    ids = _ids(b=3, t=8, seed=1)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    one_pass = clm_loss(model(input_ids=ids, attention_mask=mask).logits, labels)
    assert torch.allclose(prefix_loss(model, ids, attention_mask=mask), one_pass, atol=1e-5)
    assert torch.allclose(prefix_loss(model, ids, labels, attention_mask=mask), one_pass, atol=1e-5)


def test_prefix_loss_differs_for_a_bidirectional_model():
    model = _bert(False)
    ids = _ids(b=2, t=8)
    with torch.no_grad():
        one_pass = model(input_ids=ids, labels=ids).loss
    # untrained, the gap is small but far above float error (the causal test above holds to 1e-5)
    assert abs(float(prefix_loss(model, ids)) - float(one_pass)) > 5e-5


def test_prefix_loss_predicts_each_target_from_the_tokens_before_it():
    """Even for a bidirectional model, the prediction of token k sees tokens 0..k-1 only: two
    inputs that differ only at position k (the target's own position) get the same prefix loss
    for that target. A prefix that included the target would tell them apart."""
    model = _bert(False)
    ids = _ids(b=1, t=8, seed=2)
    other = ids.clone()
    other[0, 5] = (other[0, 5] + 1) % model.config.vocab_size
    labels = torch.full_like(ids, -100)
    labels[0, 5] = int(ids[0, 5])  # one target, the same for both inputs
    a, b = prefix_loss(model, ids, labels), prefix_loss(model, other, labels)
    assert torch.equal(a, b)
    with torch.no_grad():  # while the model itself does look at position 5
        full = [model(input_ids=x).logits[0, 4] for x in (ids, other)]
    assert not torch.equal(full[0], full[1])


def test_prefix_loss_validates():
    model, ids = _gpt2(), _ids(b=2, t=6)
    with pytest.raises(ValueError, match="at least one target"):
        prefix_loss(model, ids, torch.full_like(ids, -100))
    with pytest.raises(ValueError, match="shape"):
        prefix_loss(model, ids, ids[:, :4])
    with pytest.raises(ValueError, match="at least one target"):
        prefix_loss(model, ids[:, :1])
