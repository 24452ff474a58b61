"""Behaviour tests of the claims lesson 15 (z-loss and multi-token prediction) makes about
transformers that no other test checks: which configs carry a z-loss coefficient, that
``ForCausalLMLoss`` computes in float32, and that ``Trainer`` smooths the labels with
``LabelSmoother``. The other claims name their tests in ``docs/claims.md``
(``tests/test_zloss_mtp.py``, ``tests/test_moe.py``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _z_loss_fields(config) -> dict[str, object]:
    """The fields of ``config.to_dict()`` (nested dicts included) whose name holds ``z_loss``."""
    found: dict[str, object] = {}

    def walk(d: dict, prefix: str) -> None:
        for key, value in d.items():
            if "z_loss" in str(key):
                found[prefix + str(key)] = value
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk(config.to_dict(), "")
    return found


@pytest.mark.slow
def test_claim_15_bamba_only_z_loss() -> None:
    """Every config of ``CONFIG_MAPPING`` built with its defaults: Bamba alone has an output
    z-loss coefficient (0.0); Switch Transformers and NLLB-MoE a router one (0.001)."""
    from transformers import CONFIG_MAPPING

    found, built = {}, 0
    for name in CONFIG_MAPPING:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = CONFIG_MAPPING[name]()
        except Exception:  # a few configs cannot be built without arguments
            continue
        built += 1
        fields = _z_loss_fields(config)
        if fields:
            found[name] = fields
    assert built > 300  # the scan covered the library, not a handful of configs
    assert found == {
        "bamba": {"z_loss_coefficient": 0.0},
        "nllb-moe": {"router_z_loss_coef": 0.001},
        "switch_transformers": {"router_z_loss_coef": 0.001},
    }


def test_claim_15_forcausallm_float32() -> None:
    """``ForCausalLMLoss`` on bfloat16 logits equals the cross-entropy of the logits cast to
    float32, and differs from the one computed in bfloat16."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 9, 301, generator=g) * 4 + 30).bfloat16()  # (B, T, V), |log Z| ~ 40
    labels = torch.randint(0, 301, (2, 9), generator=g)
    labels[1, 6:] = -100
    loss = ForCausalLMLoss(logits, labels, 301)
    targets = labels[:, 1:].reshape(-1)
    in_float32 = F.cross_entropy(logits[:, :-1].float().reshape(-1, 301), targets)
    in_bfloat16 = F.cross_entropy(logits[:, :-1].reshape(-1, 301), targets).float()
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, in_float32, rtol=1e-6, atol=1e-6)
    assert abs(loss.item() - in_bfloat16.item()) > 1e-4


def test_claim_15_trainer_label_smoothing(tmp_path) -> None:
    """``Trainer(args=TrainingArguments(label_smoothing_factor=e))`` holds a ``LabelSmoother``
    of epsilon ``e``; with the default 0 it holds none."""
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from transformers.trainer_pt_utils import LabelSmoother

    model = GPT2LMHeadModel(GPT2Config(vocab_size=17, n_positions=8, n_embd=8, n_layer=1, n_head=1))
    common = dict(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    smoothed = Trainer(model=model, args=TrainingArguments(label_smoothing_factor=0.2, **common))
    plain = Trainer(model=model, args=TrainingArguments(**common))
    assert isinstance(smoothed.label_smoother, LabelSmoother)
    assert smoothed.label_smoother.epsilon == pytest.approx(0.2)
    assert plain.label_smoother is None
