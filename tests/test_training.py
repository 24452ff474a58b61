"""lmlessons.course.batches and lmlessons.course.training: seeded batches, the loop, gradient
accumulation, the display hook, evaluation."""

from __future__ import annotations

import math

import pytest
import torch
from _exact import same_tensors
from _tiny import SMALL_BERT, SMALL_GPT2

import lmlessons.course.training as training_module
from lmlessons import (
    History,
    clm_batches,
    evaluate,
    load_corpus,
    mlm_batches,
    nsp_batches,
    pack_sequences,
    tiny_bert_lm_head,
    tiny_bert_mlm,
    tiny_bert_pretraining,
    tiny_gpt2,
    tokenize_documents,
    train,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def docs():
    return load_corpus("course").train[:40]


def g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def quick_train(model: torch.nn.Module, batches, steps: int) -> History:
    """AdamW at 3e-3 without warm-up: the tiny models learn visibly in a few steps."""
    return train(model, batches, max_steps=steps, lr=3e-3, warmup_steps=0, live=False)


def sgd_step(model: torch.nn.Module, batches: list[dict], **options) -> History:
    """One plain SGD step (lr 1, no clipping): the parameters move by exactly the gradient."""
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    return train(
        model, batches, max_steps=1, optimizer=opt, max_grad_norm=None, live=False, **options
    )


# ---------------------------------------------------------------------------------------------
# Batches


def test_pack_sequences_respects_documents_and_length() -> None:
    token_docs = [[[5, 6, 7], [8, 9]], [[10] * 9], [[11, 12]]]
    seqs = pack_sequences(token_docs, max_length=7, cls_token_id=2, sep_token_id=3)
    assert seqs == [
        [2, 5, 6, 7, 8, 9, 3],
        [2, *[10] * 5, 3],
        [2, 10, 10, 10, 10, 3],
        [2, 11, 12, 3],
    ]


def test_mlm_batches(tok, docs) -> None:
    batches = mlm_batches(docs, tok, batch_size=8, max_length=32, generator=g())
    b = next(batches)
    assert set(b) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    B, T = b["input_ids"].shape
    assert B == 8 and T <= 32 and all(v.shape == (B, T) for v in b.values())
    selected = b["labels"] != -100
    special = torch.isin(b["labels"], torch.tensor(tok.all_special_ids))
    assert selected.any() and not special.any()  # [CLS]/[SEP]/[PAD] are never targets
    assert (b["attention_mask"][selected] == 1).all()
    masked = b["input_ids"] == tok.mask_token_id
    assert masked.any() and (masked <= selected).all()
    # Same seed, same batches; another seed, other batches.
    again = next(mlm_batches(docs, tok, batch_size=8, max_length=32, generator=g()))
    assert same_tensors(b, again)
    other = next(mlm_batches(docs, tok, batch_size=8, max_length=32, generator=g(1)))
    assert not torch.equal(b["labels"], other["labels"])


def test_one_epoch_covers_every_sequence_once(tok, docs) -> None:
    seqs = pack_sequences(
        tokenize_documents(docs, tok),
        max_length=32,
        cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id,
    )
    seen = []
    for b in clm_batches(docs, tok, batch_size=7, max_length=32, epochs=1, generator=g()):
        for row, mask in zip(b["input_ids"], b["attention_mask"]):
            seen.append(row[mask.bool()].tolist())
    assert sorted(seen) == sorted(seqs)


def test_clm_batches_labels_are_unshifted_input_ids(tok, docs) -> None:
    b = next(clm_batches(docs, tok, batch_size=8, max_length=32, generator=g()))
    assert set(b) == {"input_ids", "attention_mask", "labels"}
    pad = b["attention_mask"] == 0
    assert pad.any()
    assert torch.equal(b["labels"][~pad], b["input_ids"][~pad])  # no shift here: the model shifts
    assert (b["labels"][pad] == -100).all()
    assert (b["input_ids"][:, 0] == tok.cls_token_id).all()


def test_nsp_batches(tok, docs) -> None:
    b = next(nsp_batches(docs, tok, batch_size=16, max_length=48, generator=g()))
    assert set(b) == {
        "input_ids",
        "token_type_ids",
        "attention_mask",
        "labels",
        "next_sentence_label",
    }
    assert b["next_sentence_label"].shape == (16,)
    assert set(b["next_sentence_label"].tolist()) <= {0, 1}
    assert (b["attention_mask"].sum(1) <= 48).all()
    assert (b["token_type_ids"][b["attention_mask"] == 0] == 0).all()
    assert (b["token_type_ids"].max(1).values == 1).all()  # every row has a segment B
    n_pairs = sum(
        x["input_ids"].shape[0]
        for x in nsp_batches(docs, tok, max_length=48, epochs=1, generator=g())
    )
    labels = torch.cat(
        [
            x["next_sentence_label"]
            for x in nsp_batches(docs, tok, max_length=48, epochs=2, generator=g())
        ]
    )
    assert 0.35 < labels.float().mean().item() < 0.65 and n_pairs > 40


def test_batch_argument_errors(tok, docs) -> None:
    with pytest.raises(TypeError, match="documents"):
        mlm_batches("just a string", tok)
    with pytest.raises(TypeError, match=r"documents\[0\]"):
        clm_batches(["a sentence", "another"], tok)
    with pytest.raises(ValueError, match="must not be empty"):
        clm_batches([], tok)
    with pytest.raises(ValueError, match="batch_size"):
        mlm_batches(docs, tok, batch_size=0)
    with pytest.raises(ValueError, match="mlm_probability"):
        mlm_batches(docs, tok, mlm_probability=1.5)
    with pytest.raises(TypeError, match="generator"):
        clm_batches(docs, tok, generator=0)
    with pytest.raises(ValueError, match="at least 2 documents"):
        nsp_batches(docs[:1], tok)
    with pytest.raises(ValueError, match="tokenizer must define"):
        mlm_batches(docs, object())


# ---------------------------------------------------------------------------------------------
# The loop


def test_mlm_loss_decreases_and_is_deterministic(tok, docs) -> None:
    def run() -> History:
        model = tiny_bert_mlm(tok, seed=0, **SMALL_BERT)
        return quick_train(
            model, mlm_batches(docs, tok, batch_size=16, max_length=32, generator=g()), 25
        )

    h = run()
    assert h.objective == "mlm" and h.num_steps == 25 and h.stopped_by == "max_steps"
    assert abs(h.loss[0] - math.log(len(tok))) < 0.5  # an untrained model is near uniform
    assert h.final(window=5) < h.loss[0] - 1.0
    assert run().loss == h.loss  # same seeds and step budget: the same run, bit for bit
    assert h.tokens_seen == sorted(h.tokens_seen) and h.tokens_seen[-1] > 25 * 16 * 5
    assert all(n > 0 for n in h.num_items)


def test_pretraining_records_both_terms(tok, docs) -> None:
    model = tiny_bert_pretraining(tok, **SMALL_BERT)
    h = quick_train(model, nsp_batches(docs, tok, batch_size=16, max_length=48, generator=g()), 12)
    assert h.objective == "pretraining"
    assert len(h.mlm_loss) == len(h.nsp_loss) == len(h.nsp_accuracy) == 12
    for total, mlm, nsp in zip(h.loss, h.mlm_loss, h.nsp_loss):
        assert total == pytest.approx(mlm + nsp, abs=1e-5)
    assert all(0.0 <= a <= 1.0 for a in h.nsp_accuracy)
    assert 0.3 < h.nsp_loss[0] < 1.2  # about ln 2 at the start
    assert h.final("mlm_loss", 3) < h.mlm_loss[0]


@pytest.mark.parametrize("factory", [tiny_gpt2, tiny_bert_lm_head])
def test_causal_loss_decreases(tok, docs, factory) -> None:
    model = factory(tok, **(SMALL_GPT2 if factory is tiny_gpt2 else SMALL_BERT))
    h = quick_train(model, clm_batches(docs, tok, batch_size=16, max_length=32, generator=g()), 20)
    assert h.objective == "clm"
    assert h.final(window=5) < h.loss[0] - 1.0
    assert not model.training  # left in eval mode


def _split(batch: dict, rows: int) -> list[dict]:
    return [{k: v[:rows] for k, v in batch.items()}, {k: v[rows:] for k, v in batch.items()}]


@pytest.mark.parametrize("objective", ["mlm", "pretraining", "clm"])
def test_grad_accumulation_equals_full_batch(tok, docs, objective) -> None:
    """Two micro-batches with num_items_in_batch == one step on the whole batch (to 1e-5)."""
    if objective == "mlm":
        factory, batch = (
            tiny_bert_mlm,
            next(
                mlm_batches(
                    docs, tok, batch_size=12, max_length=32, mlm_probability=0.3, generator=g()
                )
            ),
        )
    elif objective == "pretraining":
        factory, batch = (
            tiny_bert_pretraining,
            next(nsp_batches(docs, tok, batch_size=12, max_length=48, generator=g())),
        )
    else:
        factory, batch = (
            tiny_bert_lm_head,
            next(clm_batches(docs, tok, batch_size=12, max_length=32, generator=g())),
        )
    halves = _split(batch, 3)  # unequal halves: 3 and 9 rows, different target counts

    def one_step(batches: list[dict], k: int) -> tuple[torch.nn.Module, History]:
        model = factory(tok, seed=0, **SMALL_BERT)
        return model, sgd_step(model, batches, grad_accum_steps=k)

    full, h_full = one_step([batch], 1)
    acc, h_acc = one_step(halves, 2)
    assert h_full.num_items == h_acc.num_items
    assert h_acc.loss[0] == pytest.approx(h_full.loss[0], abs=1e-5)
    for (name, p), q in zip(full.named_parameters(), acc.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)

    # The pre-fix Trainer averaged the micro-batch means: measurably different here, so the
    # equality above is a real check.
    key = {"mlm": "mlm_loss", "pretraining": "loss", "clm": "clm_loss"}[objective]
    mean_of_means = sum(evaluate(full, [h])[key] for h in halves) / 2
    assert abs(mean_of_means - evaluate(full, [batch])[key]) > 1e-3


def test_sparse_prediction_gives_the_same_step(tok, docs) -> None:
    batch = next(nsp_batches(docs, tok, batch_size=8, max_length=48, generator=g()))
    params = []
    for sparse in (True, False):
        model = tiny_bert_pretraining(tok, seed=0, **SMALL_BERT)
        h = sgd_step(model, [batch], sparse_prediction=sparse)
        params.append((h.loss[0], [p.detach().clone() for p in model.parameters()]))
    assert params[0][0] == pytest.approx(params[1][0], abs=1e-5)
    for p, q in zip(params[0][1], params[1][1]):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0)


def test_budgets_and_finite_batches(tok, docs) -> None:
    model = tiny_gpt2(tok, **SMALL_GPT2)
    h = train(
        model,
        clm_batches(docs, tok, batch_size=4, max_length=16, generator=g()),
        max_seconds=0.5,
        live=False,
    )
    assert h.stopped_by == "max_seconds" and h.wall_time[-1] >= 0 and h.num_steps >= 1
    finite = list(clm_batches(docs[:3], tok, batch_size=4, max_length=16, epochs=1, generator=g()))
    h = train(model, finite, live=False)
    assert h.stopped_by == "batches" and h.num_steps == len(finite)
    h = train(model, finite, grad_accum_steps=2, live=False)
    assert h.num_steps == len(finite) // 2


def test_no_batch_is_drawn_beyond_the_budget(tok, docs) -> None:
    """The budget is checked before a step's batches are drawn: a caller can keep using the
    iterator (e.g. to continue training) without losing batches."""
    drawn = []

    def counted():
        for batch in clm_batches(docs, tok, batch_size=4, max_length=16, generator=g()):
            drawn.append(batch)
            yield batch

    batches = counted()
    h = train(tiny_gpt2(tok, **SMALL_GPT2), batches, max_steps=3, grad_accum_steps=2, live=False)
    assert h.stopped_by == "max_steps" and len(drawn) == 6
    assert sum(h.num_items) == sum(int((b["labels"][:, 1:] != -100).sum()) for b in drawn)
    assert next(batches) is drawn[-1] and len(drawn) == 7  # the next batch is still there


def test_schedules(tok, docs) -> None:
    model = tiny_gpt2(tok, **SMALL_GPT2)
    batches = clm_batches(docs, tok, batch_size=4, max_length=16, generator=g())
    h = train(model, batches, max_steps=10, lr=1e-3, warmup_steps=4, schedule="cosine", live=False)
    assert h.lr[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert h.lr[4] == pytest.approx(1e-3) and h.lr[-1] < h.lr[5] < h.lr[4]


def test_train_argument_errors(tok, docs) -> None:
    model = tiny_gpt2(tok, **SMALL_GPT2)
    endless = clm_batches(docs, tok, generator=g())
    with pytest.raises(ValueError, match="max_steps or max_seconds"):
        train(model, endless, live=False)
    with pytest.raises(ValueError, match="objective must be one of"):
        train(model, endless, objective="mml", max_steps=1, live=False)
    with pytest.raises(ValueError, match=r"needs batch keys.*next_sentence_label"):
        train(model, endless, objective="pretraining", max_steps=1, live=False)
    with pytest.raises(ValueError, match="grad_accum_steps"):
        train(model, endless, max_steps=1, grad_accum_steps=0, live=False)
    with pytest.raises(ValueError, match="give max_steps"):
        train(model, endless, max_seconds=1, schedule="cosine", live=False)
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        train(model, endless, max_seconds=0, live=False)
    with pytest.raises(TypeError, match="model must be"):
        train("gpt2", endless, max_steps=1, live=False)
    with pytest.raises(TypeError, match="dicts of tensors"):
        train(model, [[1, 2, 3]], live=False)
    with pytest.raises(ValueError, match="cannot tell the objective"):
        train(torch.nn.Linear(2, 2), endless, max_steps=1, live=False)


# ---------------------------------------------------------------------------------------------
# Display: train and History.plot call the installed one (lmlessons.widgets installs the lessons'
# display; its own tests are in test_widgets_training_view.py)


class _Recorder:
    """A display that records what :func:`train` and :meth:`History.plot` ask of it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def progress(self, history, budget, title, plot_every):
        self.calls.append(("progress", title, budget.total, plot_every))
        calls = self.calls

        class _Progress:
            def update(self) -> None:
                calls.append(("update", history.num_steps, history.loss[-1]))

            def close(self) -> None:
                calls.append(("close", history.stopped_by))

        return _Progress()

    def plot(self, history, ax, *, x, reference):
        self.calls.append(("plot", ax, x, reference))
        return "the axes"


def test_train_drives_the_installed_display(tok, docs, monkeypatch) -> None:
    monkeypatch.setattr(training_module, "_DISPLAY", None)  # restored after the test
    recorder = _Recorder()
    assert training_module.install_display(recorder) is None
    batches = clm_batches(docs, tok, batch_size=4, max_length=16, generator=g())
    h = train(tiny_gpt2(tok, **SMALL_GPT2), batches, max_steps=2, live=True, plot_every=0.5)
    assert recorder.calls == [
        ("progress", "GPT2LMHeadModel", 2, 0.5),
        ("update", 1, h.loss[0]),
        ("update", 2, h.loss[1]),
        ("close", "max_steps"),
    ]
    assert h.plot(x="wall_time") == "the axes"
    assert recorder.calls[-1] == ("plot", None, "wall_time", True)
    recorder.calls.clear()
    quick_train(tiny_gpt2(tok, **SMALL_GPT2), batches, 1)  # live=False
    assert recorder.calls == []
    assert training_module.install_display(None) is recorder


def test_without_a_display_a_tqdm_bar(tok, docs, capsys, monkeypatch) -> None:
    monkeypatch.setattr(training_module, "_DISPLAY", None)
    batches = clm_batches(docs, tok, batch_size=4, max_length=16, generator=g())
    train(tiny_gpt2(tok, **SMALL_GPT2), batches, max_steps=2, live=True, title="tiny")
    err = capsys.readouterr().err
    assert "tiny" in err and "2/2 step" in err  # the tqdm bar, on stderr
    train(tiny_gpt2(tok, **SMALL_GPT2), batches, max_seconds=0.2, live=True, title="timed")
    assert "timed" in (timed := capsys.readouterr().err) and "1/1 s" in timed  # ends full
    with pytest.raises(RuntimeError, match=r"import lmlessons\.widgets"):
        History(objective="clm", vocab_size=10, step=[1], loss=[2.0]).plot()


def test_history_helpers(tok, docs) -> None:
    h = History(objective="clm", vocab_size=100, step=[1, 2, 3], loss=[4.0, 2.0, 3.0])
    assert h.final(window=2) == 2.5 and h.uniform_loss == pytest.approx(math.log(100))
    assert h.smoothed()[0] == pytest.approx(4.0)  # bias-corrected: the first value itself
    assert h.smoothed(beta=0.5)[1] == pytest.approx((0.25 * 4.0 + 0.5 * 2.0) / 0.75)
    nan = float("nan")
    assert [math.isnan(v) for v in training_module.smoothed([1.0, nan, 2.0])] == [False, True, True]
    with pytest.raises(ValueError, match="no 'nsp_loss' values"):
        h.final("nsp_loss")
    assert History(**h.to_dict()) == h  # to_dict keeps every field


# ---------------------------------------------------------------------------------------------
# Evaluation agrees with transformers' own losses


def test_evaluate_matches_transformers_losses(tok, docs) -> None:
    pre = tiny_bert_pretraining(tok, **SMALL_BERT).eval()
    b = next(nsp_batches(docs, tok, batch_size=8, max_length=48, generator=g()))
    with torch.no_grad():
        hf = pre(**b).loss  # BertForPreTraining: MLM mean + NSP mean
    m = evaluate(pre, [b])
    assert m["loss"] == pytest.approx(hf.item(), abs=1e-5)
    assert m["num_sequences"] == 8 and 0 <= m["nsp_accuracy"] <= 1

    mlm = tiny_bert_mlm(tok, **SMALL_BERT).eval()
    b = next(mlm_batches(docs, tok, batch_size=8, max_length=32, generator=g()))
    with torch.no_grad():
        hf = mlm(**b).loss
    assert evaluate(mlm, [b])["mlm_loss"] == pytest.approx(hf.item(), abs=1e-5)

    gpt = tiny_gpt2(tok, **SMALL_GPT2).eval()
    b = next(clm_batches(docs, tok, batch_size=8, max_length=32, generator=g()))
    with torch.no_grad():
        hf = gpt(**b).loss  # GPT2LMHeadModel shifts the labels inside
    m = evaluate(gpt, [b])
    assert m["clm_loss"] == pytest.approx(hf.item(), abs=1e-5)
    assert m["perplexity"] == pytest.approx(math.exp(hf.item()), rel=1e-5)
    assert m["num_targets"] == int(b["labels"][:, 1:].ne(-100).sum())
