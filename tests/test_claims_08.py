"""Behaviour tests of the claims lesson 08 (bug zoo) makes about transformers.

Each ``test_claim_08_*`` checks its entry of ``docs/claims.md`` (and those that name it) against the
installed library: the course's tokenizer and checkpoint, tiny models from configs, seeded,
nothing downloaded.
"""

from __future__ import annotations

import pytest
import torch
from _exact import same_tensors
from transformers import (
    BertForMaskedLM,
    BertLMHeadModel,
    GPT2LMHeadModel,
)

from lmlessons.bugzoo.runs import RUNS, run_model
from lmlessons.course.checkpoints import load_checkpoint
from lmlessons.course.tokenizer import load_tokenizer
from tests._tiny import bert_config, seeded


def test_claim_08_mlm_runs_continue_from_the_checkpoint() -> None:
    tokenizer = load_tokenizer()
    model = run_model(RUNS["healthy_mlm"], tokenizer)
    pretrained = load_checkpoint("bert").state_dict()
    assert type(model) is BertForMaskedLM
    mine = model.state_dict()
    assert set(mine) <= set(pretrained)  # every weight of the MLM model comes from it
    assert all(torch.equal(mine[k], pretrained[k]) for k in mine)
    assert not hasattr(model.bert, "pooler") or model.bert.pooler is None  # no NSP part


def test_claim_08_causal_runs_from_random_weights() -> None:
    tokenizer = load_tokenizer()
    gpt2 = run_model(RUNS["healthy_clm"], tokenizer)
    decoder = run_model(RUNS["healthy_bert_decoder"], tokenizer)
    assert type(gpt2) is GPT2LMHeadModel and type(decoder) is BertLMHeadModel
    other_seed = run_model(RUNS["bert_decoder_other_seed"], tokenizer)
    first = next(iter(decoder.state_dict()))
    assert not torch.equal(decoder.state_dict()[first], other_seed.state_dict()[first])
    pretrained = load_checkpoint("bert").state_dict()
    embeddings = "bert.embeddings.word_embeddings.weight"
    assert not torch.equal(decoder.state_dict()[embeddings], pretrained[embeddings])


def test_claim_08_some_runs_use_the_trainer() -> None:
    import tempfile

    from transformers import Trainer

    from lmlessons.bugzoo import loops
    from lmlessons.course.trainer_ga import quiet_and_seeded

    spec = RUNS["healthy_mlm_trainer"]
    assert spec.batch_size == 16 and spec.micro_batches == 4
    model = seeded(BertForMaskedLM, bert_config())
    row = {"input_ids": load_tokenizer()("The dog ran.")["input_ids"]}
    with tempfile.TemporaryDirectory() as out, quiet_and_seeded():
        args = loops.trainer_arguments(out, spec, 1)
        assert args.gradient_accumulation_steps == 4 and args.per_device_train_batch_size == 4
        for run_id in ("healthy_mlm_trainer", "trainer_drops_num_items"):
            optimizers = loops.optimizer_and_warmup(model, spec.lr)
            trainer = RUNS[run_id].trainer(
                model=model,
                args=args,
                train_dataset=[row],
                optimizers=optimizers,
            )
            assert isinstance(trainer, Trainer)
            assert trainer.optimizer is optimizers[0] and trainer.lr_scheduler is optimizers[1]


@pytest.mark.slow
def test_claim_08_chat_runs_continue_from_the_gpt2_checkpoint() -> None:
    from lmlessons.bugzoo.data import chat_data

    model = run_model(RUNS["healthy_chat"], chat_data()[2])
    assert type(model) is GPT2LMHeadModel
    pretrained = load_checkpoint("gpt2").state_dict()
    mine = model.state_dict()
    assert same_tensors(mine, pretrained)
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0 for m in dropouts)  # the checkpoint's 0.1, off


def test_claim_08_trainer_adds_up_bert_mlm_micro_batch_means() -> None:
    from lmlessons.bugzoo import bugs
    from lmlessons.course import trainer_ga
    from lmlessons.course.models import tiny_bert_mlm

    tokenizer = load_tokenizer()
    texts = ["The dog chased the cat out of the garden.", "It rained."] * 4
    batch = trainer_ga.model_inputs("BertForMaskedLM", trainer_ga.ga_batch(tokenizer, texts))
    reference = trainer_ga.reference_gradient(tiny_bert_mlm(tokenizer, seed=0), batch)
    measured = {}
    for factory in (bugs.trainer_model_loss, bugs.trainer_fixed):
        grads = trainer_ga.trainer_gradient(
            tiny_bert_mlm(tokenizer, seed=0),
            batch,
            gradient_accumulation_steps=4,
            trainer_class=factory,
        )
        measured[factory] = trainer_ga.compare(grads, reference)
    ratio, _ = measured[bugs.trainer_model_loss]
    assert 3.0 < ratio < 5.0  # about 4: four micro-batch means added up
    assert (
        measured[bugs.trainer_fixed][1] < 1e-5
    )  # sum / num_items_in_batch: the one-batch gradient
