"""Bad input gets a ValueError or TypeError whose message starts with the argument's name and,
for a wrong type, ends with the type it got: the core's public functions, one row per argument."""

from __future__ import annotations

import pytest
import torch

from lmlessons import bert_pretraining_loss, clm_loss, mask_tokens, mlm_loss, nsp_loss, shift_labels

IDS = torch.tensor([[2, 7, 8, 9, 3]])  # (1, T)
LOGITS = torch.zeros(1, 5, 11)  # (1, T, V)
NSP = torch.zeros(1, 2)  # (B, 2)
NSP_LABELS = torch.tensor([0])


def _mask(**bad: object) -> object:
    args: dict[str, object] = dict(mask_token_id=4, vocab_size=11)
    return mask_tokens(**{"input_ids": IDS, **args, **bad})  # type: ignore[arg-type]


def _pretraining(**bad: object) -> object:
    args = dict(mlm_logits=LOGITS, nsp_logits=NSP, mlm_labels=IDS, nsp_labels=NSP_LABELS)
    return bert_pretraining_loss(**{**args, **bad})  # type: ignore[arg-type]


CASES = [
    # (call, argument, exception, the end of the message or None)
    (lambda: _mask(input_ids=[[1, 2]]), "input_ids", TypeError, "got list"),
    (lambda: _mask(mlm_probability=1.5), "mlm_probability", ValueError, None),
    (lambda: _mask(mask_replace_prob=-0.1), "mask_replace_prob", ValueError, None),
    (lambda: _mask(special_tokens_mask="no"), "special_tokens_mask", TypeError, "got str"),
    (lambda: shift_labels([1, 2]), "labels", TypeError, "got list"),
    (lambda: shift_labels(IDS, ignore_index=0.5), "ignore_index", TypeError, None),
    (lambda: mlm_loss(torch.zeros(5), IDS), "logits", ValueError, None),
    (lambda: mlm_loss(LOGITS, IDS[:, :3]), "labels", ValueError, "got (1, 3)"),
    (lambda: clm_loss(LOGITS, "x"), "labels", TypeError, "got str"),
    (lambda: nsp_loss(torch.zeros(1, 3), NSP_LABELS), "logits", ValueError, None),
    (lambda: nsp_loss(NSP, torch.tensor([0, 1])), "labels", ValueError, "got (2,)"),
    (lambda: nsp_loss(NSP, torch.tensor([-100])), "labels", ValueError, None),
    (lambda: _pretraining(mlm_logits=torch.zeros(5)), "mlm_logits", ValueError, None),
    (lambda: _pretraining(mlm_labels=IDS[:, :2]), "mlm_labels", ValueError, None),
    (lambda: _pretraining(nsp_logits=torch.zeros(1, 3)), "nsp_logits", ValueError, None),
    (lambda: _pretraining(nsp_labels=torch.tensor([5])), "nsp_labels", ValueError, None),
    (lambda: _pretraining(mlm_weight="1"), "mlm_weight", TypeError, "got str"),
    (lambda: _pretraining(nsp_weight=None), "nsp_weight", TypeError, "got NoneType"),
]


@pytest.mark.parametrize(("call", "argument", "error", "ending"), CASES, ids=[c[1] for c in CASES])
def test_the_message_names_the_argument(call, argument, error, ending) -> None:
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(f"{argument} "), message
    if ending is not None:
        assert message.endswith(ending), message


def test_the_shape_message_states_the_expected_shape() -> None:
    with pytest.raises(ValueError) as raised:
        mlm_loss(LOGITS, IDS[:, :3])
    assert "logits.shape[:-1] = (1, 5)" in str(raised.value)
    with pytest.raises(ValueError) as raised:
        nsp_loss(NSP, torch.tensor([0, 1]))
    assert "must have shape (1,)" in str(raised.value)
    with pytest.raises(ValueError) as raised:
        _pretraining(nsp_logits=torch.zeros(3, 2), nsp_labels=torch.tensor([0, 1, 0]))
    assert str(raised.value).endswith("must share B, got 1 and 3")


def test_whole_messages_of_the_type_and_rank_checks() -> None:
    with pytest.raises(TypeError) as raised:
        _mask(special_tokens_mask="no")
    assert str(raised.value) == "special_tokens_mask must be a torch.Tensor or None, got str"
    with pytest.raises(ValueError) as raised:
        shift_labels(torch.tensor(3))
    assert str(raised.value) == "labels must have at least 1 dimension (..., T), got a scalar"
    with pytest.raises(TypeError) as raised:
        nsp_loss([[0.0, 0.0]], NSP_LABELS)
    assert str(raised.value).startswith("logits ")


def test_random_replacements_keep_the_dtype_of_the_input() -> None:
    ids = IDS.to(torch.int32)
    masked, labels = mask_tokens(
        ids,
        mask_token_id=4,
        vocab_size=11,
        mlm_probability=1.0,
        mask_replace_prob=0.0,
        random_replace_prob=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert masked.dtype == torch.int32 and labels.dtype == torch.int32
