"""Behaviour tests of the claims lesson 14 (router losses) makes about transformers' Mixtral and
DeepSeek-V3 and TRL's ``SFTTrainer``: which tokens the aux loss counts, the average over the
layers, where the aux term goes under ``SFTTrainer`` with gradient accumulation, and that nothing
in transformers updates DeepSeek-V3's ``e_score_correction_bias``.

Each ``test_claim_14_*`` checks its entry of ``docs/claims.md`` against the installed libraries,
on tiny models built from configs (nothing downloaded). The lesson's other claims name tests in
``tests/test_moe.py`` and ``tests/test_moe_runs.py``.
"""

from __future__ import annotations

import tempfile

import pytest
import torch

from lmlessons.course.models import tiny_mixtral
from lmlessons.moe import load_balancing_loss_func

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
TEXTS = (
    "the sea is cold",
    "rain falls on the roof of the old barn",
    "the hens lay eggs",
    "we sing",
)


def _mixtral_loss():
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as upstream

    return upstream


def _padded(tok) -> dict[str, torch.Tensor]:
    return tok(list(TEXTS), padding=True, return_tensors="pt")


def test_claim_14_mask_not_labels(tok) -> None:
    """MixtralForCausalLM's aux_loss: the attention mask changes it, the labels (-100 on a
    "prompt") do not; with the mask it is load_balancing_loss_func over the real tokens."""
    model = tiny_mixtral(tok, seed=0, output_router_logits=True, **SMALL).eval()
    batch = _padded(tok)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    labels = ids.masked_fill(mask == 0, -100)
    prompt_labels = labels.clone()
    prompt_labels[:, : ids.shape[1] // 2] = -100
    with torch.no_grad():
        no_labels = model(input_ids=ids, attention_mask=mask)
        all_labels = model(input_ids=ids, attention_mask=mask, labels=labels)
        prompts = model(input_ids=ids, attention_mask=mask, labels=prompt_labels)
        unmasked = model(input_ids=ids)
    assert torch.equal(prompts.aux_loss, no_labels.aux_loss)
    assert torch.equal(all_labels.aux_loss, no_labels.aux_loss)
    assert not torch.allclose(prompts.loss, all_labels.loss)  # the labels did reach the LM loss
    assert not torch.allclose(unmasked.aux_loss, no_labels.aux_loss, atol=1e-5)
    ours = load_balancing_loss_func(no_labels.router_logits, 4, 2, mask)
    torch.testing.assert_close(no_labels.aux_loss, ours, rtol=1e-6, atol=1e-6)
    assert no_labels.router_logits[0].shape == (ids.numel(), 4)  # padding included


def test_claim_14_layers_averaged_before_product() -> None:
    """transformers' Mixtral loss of two layers uneven in opposite directions is top_k, the even
    value, while each layer alone gives num_experts."""
    upstream = _mixtral_loss()
    sea = torch.tensor([[10.0, 9.9, -10.0, -10.0]]).repeat(8, 1)  # (8, 4): experts 0 and 1
    farm = sea.flip(-1)  # experts 3 and 2
    torch.testing.assert_close(upstream((sea, farm), 4, 2), torch.tensor(2.0), atol=1e-4, rtol=0)
    for layer in (sea, farm):
        torch.testing.assert_close(upstream((layer,), 4, 2), torch.tensor(4.0), atol=1e-3, rtol=0)


@pytest.mark.slow
def test_claim_14_sft_trainer_divides_aux_by_accumulation_steps() -> None:
    """TRL's SFTTrainer.compute_loss with num_items_in_batch: the LM sum over that count plus
    router_aux_loss_coef * aux_loss / current_gradient_accumulation_steps."""
    trl = pytest.importorskip("trl", reason="TRL is a course dependency (requirements.txt)")
    datasets = pytest.importorskip("datasets", reason="TRL needs datasets")
    from lmlessons.course.chat import chat_tokenizer
    from lmlessons.course.trainer_ga import quiet_and_seeded

    tok = chat_tokenizer()
    coef = 0.5
    model = tiny_mixtral(tok, seed=0, output_router_logits=True, router_aux_loss_coef=coef, **SMALL)
    rows = datasets.Dataset.from_list([{"text": t} for t in TEXTS])
    with tempfile.TemporaryDirectory() as out, quiet_and_seeded():
        args = trl.SFTConfig(output_dir=out, report_to="none", use_cpu=True, max_length=None,
                             gradient_accumulation_steps=4)  # fmt: skip
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tok)
        batch = trainer.data_collator(list(trainer.train_dataset))
        model.eval()
        losses = {}
        for steps in (1, 4):
            trainer.current_gradient_accumulation_steps = steps
            loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=torch.tensor(20))
            losses[steps] = loss.detach()
    with torch.no_grad():
        aux = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    output_router_logits=True).aux_loss  # fmt: skip
    assert float(aux) > 1.0  # a real aux term, near top_k
    expected = coef * aux * (1 - 1 / 4)  # the aux term at 1 step minus the term at 4 steps
    torch.testing.assert_close(losses[1] - losses[4], expected, rtol=1e-4, atol=1e-5)


def _tiny_deepseek_v3():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(
        vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=16,
        num_hidden_layers=2, first_k_dense_replace=0, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, n_shared_experts=1, num_attention_heads=2, num_key_value_heads=2,
        kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4,
        max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    return DeepseekV3ForCausalLM(config)


@pytest.mark.slow
def test_claim_14_deepseek_bias_not_updated() -> None:
    """A real Trainer run of a tiny DeepseekV3ForCausalLM (lr 1e-2, 4 steps) changes the router
    weights and leaves every e_score_correction_bias exactly as it was: a buffer nothing updates."""
    from transformers import PrinterCallback, Trainer, TrainingArguments
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    from lmlessons.course.trainer_ga import quiet_and_seeded

    model = _tiny_deepseek_v3()
    routers = [m for m in model.modules() if isinstance(m, DeepseekV3TopkRouter)]
    assert len(routers) == 2
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for r in routers:
            r.e_score_correction_bias.copy_(torch.randn(4, generator=g) * 0.1)  # not all zero
    bias_before = [r.e_score_correction_bias.clone() for r in routers]
    weight_before = [r.weight.detach().clone() for r in routers]
    ids = torch.randint(0, 50, (8, 12), generator=g)
    data = [{"input_ids": ids[i], "labels": ids[i]} for i in range(8)]
    with tempfile.TemporaryDirectory() as out, quiet_and_seeded():
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=4,
            max_steps=4,
            learning_rate=1e-2,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=data)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    for r, bias, weight in zip(routers, bias_before, weight_before):
        assert torch.equal(r.e_score_correction_bias, bias)
        assert not torch.equal(r.weight.detach(), weight)  # the routers did train
        assert "e_score_correction_bias" in dict(r.named_buffers())
