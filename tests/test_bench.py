"""The benchmark runs at a tiny size and reports the three ratios (speed targets are not asserted)."""

from __future__ import annotations

import json

import pytest

from lmlessons import bench
from lmlessons.widgets.scale import estimate_peak_bytes
from tools.bench import (
    BenchConfig,
    BenchResult,
    format_table,
    measure_peak_memory,
    measure_peak_memory_many,
    run_benchmarks,
)


@pytest.fixture(scope="module")
def result() -> BenchResult:
    return run_benchmarks(BenchConfig.tiny(memory=False))


def test_three_rows_with_sane_numbers(result):
    assert [r.name[0] for r in result.rows] == ["1", "2", "3"]
    for r in result.rows:
        assert r.baseline_s > 0 and r.candidate_s > 0
        assert r.speedup == pytest.approx(r.baseline_s / r.candidate_s)
        assert len(r.candidate_times) == len(r.baseline_times) >= 2
        assert min(r.baseline_times) <= r.baseline_s <= max(r.baseline_times)  # a median
    mask, mlm, clm = result.rows
    assert (mask.speedup_target, mlm.speedup_target, clm.speedup_target) == (1.3, 6.0, 1.0)
    assert clm.memory_target == 0.2
    assert mlm.baseline_peak_mib is None  # memory=False


def test_candidates_agree_with_dense(result):
    for r in result.rows[1:]:  # loss and gradients checked inside the benchmark
        assert r.max_abs_diff is not None and r.max_abs_diff < 1e-4


def test_table_and_json(result, tmp_path):
    table = format_table(result)
    for r in result.rows:
        assert f"{r.speedup:.2f}x" in table
    data = json.loads(json.dumps(result.to_dict()))
    assert len(data["rows"]) == 3 and "met" in data["rows"][0]
    assert data["config"]["head_rows"] == result.config.head_rows


def test_plot(result, tmp_path):
    path = tmp_path / "bench.png"
    bench.plot_results(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_peak_memory_subprocess_sees_the_logits():
    """Fresh-process measurements: dense holds about three (N, V) tensors, chunked one chunk."""
    cfg = BenchConfig.tiny(
        head_rows=2048, head_seq_len=256, hidden_size=32, vocab_size=4096, chunk_size=64
    )
    dense, method = measure_peak_memory("clm", "dense", cfg)
    chunked, _ = measure_peak_memory("clm", "chunked", cfg)
    assert method in ("VmHWM", "ru_maxrss")
    want_dense = estimate_peak_bytes(2048, 32, 4096) / 2**20  # 96 MiB of (N, V) tensors + gradients
    want_chunked = estimate_peak_bytes(2048, 32, 4096, chunk_size=64) / 2**20  # 1 MiB + gradients
    assert abs(dense - want_dense) <= 0.1 * want_dense + 10, (dense, want_dense)
    assert (
        chunked <= want_chunked + 10
    )  # + first-use allocations of the libraries in a fresh process
    assert chunked < dense / 3


def test_memory_helpers_reject_bad_cases():
    with pytest.raises(ValueError, match="variant"):
        measure_peak_memory("clm", "sparse", BenchConfig.tiny())
    with pytest.raises(ValueError, match="variant"):
        measure_peak_memory_many([("nsp", "dense", BenchConfig.tiny())])
    with pytest.raises(TypeError, match="BenchConfig"):
        measure_peak_memory_many([("clm", "dense", {"head_rows": 8})])


def test_cli_quick_writes_only_where_asked(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--quick", "--no-memory", "--repeats", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "speed-up" in printed and "masking" in printed
    assert json.loads(out.read_text())["config"]["repeats"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize(
    "kwargs", [dict(head_rows=100, head_seq_len=64), dict(repeats=0), dict(mlm_probability=0.0)]
)
def test_bad_config(kwargs):
    with pytest.raises(ValueError):
        BenchConfig.tiny(**kwargs)


def test_run_benchmarks_rejects_wrong_config_type():
    with pytest.raises(TypeError, match="config"):
        run_benchmarks({"repeats": 1})
