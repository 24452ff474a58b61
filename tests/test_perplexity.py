"""lmlessons.perplexity: against GPT2LMHeadModel's loss (oracle), written-out formulas, the
masked-LM pseudo-perplexity against a loop over masked copies, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM, GPT2LMHeadModel

from lmlessons._checks import IGNORE_INDEX
from lmlessons.losses import token_nll
from lmlessons.packing import pad_documents
from lmlessons.perplexity import (
    bits_per_unit,
    perplexity,
    pseudo_log_likelihoods,
    pseudo_perplexity,
    sequence_perplexities,
)
from tests._tiny import VOCAB, bert_config, gpt2_config, seeded

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def gpt2() -> GPT2LMHeadModel:
    return seeded(GPT2LMHeadModel, gpt2_config())


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randint(5, VOCAB, (int(n),), generator=g).tolist() for n in (9, 4, 13, 2)]
    return pad_documents(docs, pad_token_id=0)


@pytest.mark.parametrize("seed", range(4))
def test_perplexity_is_exp_of_gpt2_loss(gpt2, seed: int) -> None:
    batch = _batch(seed)
    with torch.no_grad():
        out = gpt2(**batch)
    assert math.isclose(
        perplexity(out.logits, batch["labels"]), math.exp(out.loss.item()), rel_tol=1e-5
    )


def test_sequence_perplexities_and_their_mean(gpt2) -> None:
    batch = _batch(1)
    with torch.no_grad():
        logits = gpt2(**batch).logits
    per_seq = sequence_perplexities(logits, batch["labels"])  # (B,)
    for b in range(logits.shape[0]):  # each row alone gives its own perplexity
        row = batch["labels"][b : b + 1]
        assert math.isclose(per_seq[b].item(), perplexity(logits[b : b + 1], row), rel_tol=1e-5)
    nll, has_target = token_nll(logits, batch["labels"])
    assert math.isclose(
        math.log(perplexity(logits, batch["labels"])),
        float(nll.sum() / has_target.sum()),
        rel_tol=1e-6,
    )
    per_seq_mean_loss = (nll.sum(-1) / has_target.sum(-1)).mean()
    assert per_seq.mean().item() >= math.exp(per_seq_mean_loss.item()) - 1e-4  # Jensen


def test_bits_per_unit_is_exact() -> None:
    assert bits_per_unit(math.log(2) * 30, 10) == pytest.approx(3.0, abs=1e-15)
    assert bits_per_unit(0.0, 7) == 0.0
    assert bits_per_unit(8 * math.log(256), 8) == pytest.approx(8.0, abs=1e-12)  # uniform bytes
    # a uniform model over V tokens, T tokens for B bytes: T log2(V) / B bits per byte
    assert bits_per_unit(12 * math.log(2500), 50) == pytest.approx(12 * math.log2(2500) / 50)


def test_bits_per_unit_of_one_unit_and_its_type_error() -> None:
    assert bits_per_unit(math.log(2) * 5, 1) == pytest.approx(5.0)  # one byte: 5 bits
    with pytest.raises(TypeError, match="total_nll must be a number of nats, got str"):
        bits_per_unit("1", 3)


def test_pseudo_perplexity_of_one_token() -> None:
    assert pseudo_perplexity(torch.tensor([-2.0])) == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError, match="at least one scored token"):
        pseudo_perplexity([torch.tensor([]), torch.tensor([])])


def _pll_by_loop(model, ids: torch.Tensor, mask_id: int, scored: torch.Tensor) -> torch.Tensor:
    out = []
    for t in scored.nonzero().flatten().tolist():
        masked = ids.clone()
        masked[t] = mask_id
        with torch.no_grad():
            logits = model(input_ids=masked[None]).logits[0, t]
        out.append(F.log_softmax(logits, -1)[ids[t]])
    return torch.stack(out)


def test_pseudo_log_likelihoods_mask_one_token_at_a_time() -> None:
    model = seeded(BertForMaskedLM, bert_config())
    ids = torch.tensor([2, 11, 12, 13, 14, 3])
    scored = torch.tensor([False, True, True, True, True, False])
    ours = pseudo_log_likelihoods(model, ids, mask_token_id=4, scored=scored)
    assert torch.allclose(ours, _pll_by_loop(model, ids, 4, scored), atol=1e-5)
    expected = math.exp(-float(ours.sum()) / 4)
    assert math.isclose(pseudo_perplexity(ours), expected, rel_tol=1e-9)
    assert math.isclose(pseudo_perplexity([ours[:2], ours[2:]]), expected, rel_tol=1e-9)


def test_pseudo_log_likelihoods_read_bert_for_pretraining_logits() -> None:
    from transformers import BertForPreTraining

    model = seeded(BertForPreTraining, bert_config())
    ids, scored = torch.tensor([2, 11, 12, 3]), torch.tensor([False, True, True, False])
    got = pseudo_log_likelihoods(model, ids, mask_token_id=4, scored=scored)
    masked = ids.repeat(2, 1)
    masked[0, 1], masked[1, 2] = 4, 4
    with torch.no_grad():
        logits = model(input_ids=masked).prediction_logits
    want = torch.stack([F.log_softmax(logits[0, 1], -1)[11], F.log_softmax(logits[1, 2], -1)[12]])
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (
            lambda: perplexity(torch.zeros(1, 3, 5), torch.full((1, 3), IGNORE_INDEX)),
            ValueError,
            "labels",
        ),
        (
            lambda: perplexity(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long)),
            ValueError,
            "logits",
        ),
        (
            lambda: perplexity(torch.zeros(1, 3, 5), torch.zeros(1, 4, dtype=torch.long)),
            ValueError,
            "labels",
        ),
        (
            lambda: sequence_perplexities(
                torch.zeros(2, 3, 5), torch.tensor([[1, 2, 3], [1, IGNORE_INDEX, IGNORE_INDEX]])
            ),
            ValueError,
            "labels",
        ),
        (lambda: bits_per_unit(-1.0, 3), ValueError, "total_nll"),
        (lambda: bits_per_unit("1", 3), TypeError, "total_nll"),
        (lambda: bits_per_unit(1.0, 0), ValueError, "num_units"),
        (lambda: pseudo_perplexity([]), ValueError, "log_likelihoods"),
        (lambda: pseudo_perplexity(torch.tensor([])), ValueError, "log_likelihoods"),
        (lambda: pseudo_perplexity([torch.tensor([1, 2])]), TypeError, "log_likelihoods"),
        (
            lambda: pseudo_log_likelihoods(
                torch.nn.Linear(1, 1),
                torch.tensor([1, 2]),
                mask_token_id=4,
                scored=torch.tensor([0, 1]),
            ),
            TypeError,
            "scored",
        ),
        (
            lambda: pseudo_log_likelihoods(
                torch.nn.Linear(1, 1),
                torch.tensor([1, 2]),
                mask_token_id=4,
                scored=torch.tensor([False, False]),
            ),
            ValueError,
            "scored",
        ),
        (
            lambda: pseudo_log_likelihoods(
                "bert", torch.tensor([1]), mask_token_id=4, scored=torch.tensor([True])
            ),
            TypeError,
            "model",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, argument) -> None:
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value).startswith(f"{argument} "), str(raised.value)
