"""Lesson 07's memory model and widget: formula by hand, checked against measured memory, and the
widget callback driven by setting slider values."""

from __future__ import annotations

import base64
import sys

import matplotlib
import pytest
from _widgets import shown_marker

matplotlib.use("Agg")

from lmlessons.course.memory import BenchConfig, measure_peak_memory_many
from lmlessons.widgets.scale import (
    CHUNK_SIZES,
    MIB,
    REAL_VOCABULARIES,
    estimate_peak_bytes,
    logits_bytes,
    plot_logits_memory,
    plot_peak_vs_chunk,
    scale_marker,
    scale_widget,
)


def test_logits_bytes():
    assert logits_bytes(8, 512, 30522) == 500_072_448  # quiz 07.3: 476.9 MiB
    assert logits_bytes(8, 512, 30522, bytes_per_value=2) == 250_036_224
    with pytest.raises(ValueError, match="vocab_size"):
        logits_bytes(1, 1, 0)
    with pytest.raises(TypeError, match="seq_len"):
        logits_bytes(1, 2.0, 3)


def test_estimate_by_hand():
    n, h, v = 100, 8, 50
    grads = n * h + v * h
    assert estimate_peak_bytes(n, h, v) == 4 * (3 * n * v + grads)
    assert estimate_peak_bytes(n, h, v, chunk_size=16) == 4 * (16 * v + grads)
    assert estimate_peak_bytes(n, h, v, chunk_size=1000) == 4 * (
        n * v + grads
    )  # one chunk of all rows
    assert estimate_peak_bytes(n, h, v, chunk_size=64, labelled_rows=15) == 4 * (15 * v + grads)
    assert estimate_peak_bytes(n, h, v, bias=True) == 4 * (3 * n * v + grads + v)
    with pytest.raises(ValueError, match="labelled_rows"):
        estimate_peak_bytes(n, h, v, labelled_rows=101)
    with pytest.raises(ValueError, match="chunk_size"):
        estimate_peak_bytes(n, h, v, chunk_size=0)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RSS high-water mark via /proc")
def test_estimate_matches_measured_memory():
    cfg = BenchConfig.tiny(
        head_rows=2048, head_seq_len=256, hidden_size=64, vocab_size=4096, chunk_size=256
    )
    big = BenchConfig.tiny(
        head_rows=2048, head_seq_len=256, hidden_size=64, vocab_size=4096, chunk_size=1024
    )
    measured = measure_peak_memory_many(
        [("clm", "dense", cfg), ("clm", "chunked", cfg), ("clm", "chunked", big)]
    )
    expected = [
        estimate_peak_bytes(2048, 64, 4096) / MIB,  # 96 MiB of (N, V) tensors + gradients
        estimate_peak_bytes(2048, 64, 4096, chunk_size=256) / MIB,
        estimate_peak_bytes(2048, 64, 4096, chunk_size=1024) / MIB,
    ]
    for (got, _), want in zip(measured, expected):
        assert abs(got - want) <= 0.1 * want + 4, (measured, expected)
    assert measured[0][0] > 2 * measured[2][0] > 0  # dense is far above chunked


@pytest.mark.slow
def test_widget_marker_and_callback():
    box = scale_widget(n_rows=16384, hidden_size=2048, vocab_size=32000, chunk_size=1024)
    peak = estimate_peak_bytes(16384, 2048, 32000, chunk_size=1024) / MIB
    dense = estimate_peak_bytes(16384, 2048, 32000) / MIB
    assert shown_marker(box) == scale_marker(32000, 1024, peak, dense)
    assert shown_marker(box).startswith("vocab_size=32000 chunk_size=1024 peak_MiB=503 ")
    data = box.output.outputs[1]["data"]
    assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "2,000 MiB" in data["text/plain"]  # 16,384 x 32,000 x 4 bytes

    box.vocab.value = 128256  # what moving the slider does
    assert shown_marker(box).startswith("vocab_size=128256 chunk_size=1024 ")
    box.chunk.value = 64
    m = shown_marker(box)
    assert m == scale_marker(
        128256,
        64,
        estimate_peak_bytes(16384, 2048, 128256, chunk_size=64) / MIB,
        estimate_peak_bytes(16384, 2048, 128256) / MIB,
    )
    small = float(m.split("peak_MiB=")[1].split()[0])
    box.chunk.value = 8192
    assert (
        float(shown_marker(box).split("peak_MiB=")[1].split()[0]) > small
    )  # bigger chunks need more memory


def test_widget_options_and_bad_arguments():
    box = scale_widget(vocab_size=8192)  # not a named vocabulary: added to the options
    assert 8192 in [v for _, v in box.vocab.options]
    assert set(REAL_VOCABULARIES.values()) <= {v for _, v in box.vocab.options}
    assert [v for _, v in box.chunk.options] == list(CHUNK_SIZES)
    with pytest.raises(ValueError, match="chunk_size"):
        scale_widget(chunk_size=1000)
    with pytest.raises(TypeError, match="n_rows"):
        scale_widget(n_rows="many")


def test_plots_draw():
    from matplotlib.figure import Figure

    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    plot_logits_memory(ax1)
    assert len(ax1.get_lines()) == len(REAL_VOCABULARIES) + 1  # + the RAM line
    plot_logits_memory(ax1)  # callable twice (no exhausted default iterator)
    plot_peak_vs_chunk(ax2, 4096, 128, 8192, current=512, measured={None: 390.0, 512: 22.0})
    labels = [t.get_text() for t in ax2.get_legend().get_texts()]
    assert "dense (measured)" in labels and "chunked (measured)" in labels
