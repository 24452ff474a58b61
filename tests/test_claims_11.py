"""Behaviour tests of the claims lesson 11 (preference losses) makes about TRL.

Each ``test_claim_11_*`` checks its entry of ``docs/claims.md`` against the installed TRL, on the
course GPT-2 checkpoint, the chat tokenizer and the course's preference set, nothing downloaded;
the ``DPOTrainer``s come from the session fixture ``dpo_trainer`` (``tests/conftest.py``).
TRL is a course dependency (``requirements.txt``): skipped, with the reason, without it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lmlessons.course.chat import chat_tokenizer
from lmlessons.course.checkpoints import load_checkpoint
from lmlessons.course.preferences import encode_pair, preference_set, step_loss
from lmlessons.course.preferences import run_logps as logps
from lmlessons.preference import preference_batch

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def _noisy(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A copy of ``model`` with seeded noise on every weight: a policy that is not the reference."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return out


def _course_parts() -> dict:
    """6 course pairs (every kind): a noisy copy of the course GPT-2 as the policy, the
    checkpoint as the explicit reference, the chat tokenizer."""
    held_out = preference_set("validation")
    reference = load_checkpoint("gpt2")
    return {
        "pairs": held_out[:4] + held_out[-2:],  # first-word pairs of both kinds, then topic pairs
        "processing_class": chat_tokenizer(),
        "model": _noisy(reference, 0),
        "ref_model": reference,
    }


@pytest.fixture
def course_dpo(dpo_trainer):
    """The ``DPOTrainer`` on :func:`_course_parts`, built once per session (the session fixture
    ``dpo_trainer``: ``course_dpo.trainer``, ``.tok``, ``.pairs``, ``.examples``)."""
    return dpo_trainer(_course_parts)


def _logged_loss(trainer, batch) -> tuple[float, dict[str, float]]:
    trainer.log({})
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
    trainer.log({})
    return float(loss), trainer.state.log_history[-1]


def test_claim_11_conversational_pairs_one_sep(course_dpo):
    """TRL tokenizes conversational pairs with the chat template and appends nothing: each
    completion ends with the template's one [SEP], exactly ``encode_pair``'s ids."""
    sep = course_dpo.tok.sep_token_id
    kinds = {p["kind"] for p in course_dpo.pairs}
    assert kinds == {"wrong topic", "wrong word", "too long"}
    for example, pair in zip(course_dpo.examples, course_dpo.pairs):
        assert example == encode_pair(course_dpo.tok, pair)
        for key in ("chosen_ids", "rejected_ids"):
            assert example[key][-1] == sep and example[key].count(sep) == 1


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "sigmoid_norm"])
def test_claim_11_recorded_loss_is_trl(course_dpo, monkeypatch, loss_type):
    """The loss ``python -m tools.preference_runs`` trains with (``step_loss``) equals
    ``DPOTrainer.compute_loss`` on the same batch, policy and reference, for each DPO loss type."""
    trainer = course_dpo.trainer
    beta = 0.5
    monkeypatch.setattr(trainer, "loss_types", [loss_type])
    monkeypatch.setattr(trainer, "loss_weights", [1.0])
    monkeypatch.setattr(trainer, "beta", beta)
    theirs, _ = _logged_loss(trainer, trainer.data_collator(course_dpo.examples))
    batch = preference_batch(course_dpo.examples, pad_token_id=course_dpo.tok.pad_token_id)
    with torch.no_grad():
        policy = logps(trainer.model, batch)
        ref_sum = logps(trainer.ref_model, batch)["sum"]
    ours = float(step_loss(policy, ref_sum, loss_type, beta))
    assert theirs == pytest.approx(ours, rel=1e-5, abs=1e-5)


def test_claim_11_accuracy_zero_when_policy_is_reference(course_dpo, monkeypatch):
    """With the policy equal to the reference every reward is 0 and TRL logs
    ``rewards/accuracies`` 0: a tie is not counted as a win."""
    trainer = course_dpo.trainer
    monkeypatch.setattr(trainer, "ref_model", copy.deepcopy(trainer.model))
    loss, logged = _logged_loss(trainer, trainer.data_collator(course_dpo.examples))
    assert loss == pytest.approx(0.6931472, abs=1e-6)
    assert logged["rewards/accuracies"] == 0.0
    assert logged["rewards/margins"] == 0.0


def _one_pair(course_dpo, model) -> dict:
    """The first course pair with ``model`` as the policy and no reference (``ref_model=None``)."""
    return {
        "pairs": course_dpo.pairs[:1],
        "processing_class": course_dpo.tok,
        "model": model,
        "ref_model": None,
    }


def test_claim_11_checkpoint_without_reference_fails(dpo_trainer, course_dpo):
    """``load_checkpoint`` builds the model from its files: ``config._name_or_path`` is empty and
    ``ref_model=None`` cannot build a reference from it."""
    model = load_checkpoint("gpt2")
    assert model.config._name_or_path == ""
    with pytest.raises(OSError):
        dpo_trainer(lambda: _one_pair(course_dpo, model), fresh=True)


def test_claim_11_reference_reloaded_from_folder(dpo_trainer, course_dpo, tmp_path):
    """A model loaded from a folder and changed in memory: with ``ref_model=None`` TRL's
    reference holds the folder's weights, not the policy's."""
    from transformers import GPT2LMHeadModel

    saved = load_checkpoint("gpt2")
    saved.save_pretrained(tmp_path / "model")
    policy = GPT2LMHeadModel.from_pretrained(tmp_path / "model")
    policy.load_state_dict(_noisy(saved, 1).state_dict())  # changed in memory, not saved
    trainer = dpo_trainer(lambda: _one_pair(course_dpo, policy), fresh=True).trainer
    ref = dict(trainer.ref_model.named_parameters())
    for name, weight in saved.named_parameters():
        assert torch.equal(ref[name].detach(), weight.detach()), name
    moved = dict(policy.named_parameters())["transformer.wte.weight"]
    assert not torch.equal(ref["transformer.wte.weight"].detach(), moved.detach())


def test_claim_11_trl_hinge_is_rso(course_dpo, monkeypatch):
    """TRL's ``hinge`` is ``relu(1 - beta * (chosen log-ratio - rejected log-ratio))`` with the
    log-ratios against the reference (RSO's hinge on normalised likelihoods): it equals that
    formula, and with the policy as its own reference every log-ratio is 0 and the loss is 1,
    which the reference-free hinge on the policy's own log-probabilities (SLiC's) is not."""
    trainer = course_dpo.trainer
    beta = 0.5
    monkeypatch.setattr(trainer, "loss_types", ["hinge"])
    monkeypatch.setattr(trainer, "loss_weights", [1.0])
    monkeypatch.setattr(trainer, "beta", beta)
    batch = preference_batch(course_dpo.examples, pad_token_id=course_dpo.tok.pad_token_id)
    collated = trainer.data_collator(course_dpo.examples)
    with torch.no_grad():
        c_pol, r_pol = logps(trainer.model, batch)["sum"].chunk(2)  # (B,) each
        c_ref, r_ref = logps(trainer.ref_model, batch)["sum"].chunk(2)  # (B,) each
    theirs, _ = _logged_loss(trainer, collated)
    rso = torch.relu(1 - beta * ((c_pol - c_ref) - (r_pol - r_ref))).mean()
    assert theirs == pytest.approx(float(rso), rel=1e-5, abs=1e-5)
    monkeypatch.setattr(trainer, "ref_model", copy.deepcopy(trainer.model))
    itself, _ = _logged_loss(trainer, collated)
    slic = float(torch.relu(1 - beta * (c_pol - r_pol)).mean())  # no reference
    assert itself == pytest.approx(1.0, abs=1e-6)
    assert slic != pytest.approx(1.0, abs=1e-3) and slic != pytest.approx(theirs, abs=1e-3)
