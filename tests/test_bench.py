"""tools.bench runs at a tiny size and reports its five ratios (speed targets are not asserted)."""

from __future__ import annotations

import json
import statistics

import pytest

import tools.bench as bench
from lmlessons.course.memory import BenchConfig
from tools.bench import BenchResult, BenchRow, format_table, run_benchmarks

pytestmark = pytest.mark.slow  # the module's benchmark fixture alone takes about a second


@pytest.fixture(scope="module")
def result() -> BenchResult:
    return run_benchmarks(BenchConfig.tiny(memory=False))


def test_five_rows_timed_as_configured(result):
    cfg = result.config
    assert [r.name[0] for r in result.rows] == ["1", "2", "3", "4", "5"]
    repeats_of = (cfg.mask_repeats, cfg.repeats, cfg.repeats, cfg.repeats, cfg.repeats)
    for r, repeats in zip(result.rows, repeats_of):
        assert len(r.baseline_times) == len(r.candidate_times) == repeats
        assert all(t > 0 for t in r.baseline_times + r.candidate_times)
        assert r.baseline_s == statistics.median(r.baseline_times)
        assert r.candidate_s == statistics.median(r.candidate_times)
    mask, mlm, clm, grouped, flattened = result.rows
    assert (mask.speedup_target, mlm.speedup_target, clm.speedup_target) == (1.3, 6.0, 1.0)
    assert (grouped.speedup_target, flattened.speedup_target) == (1.0, 0.8)
    assert clm.memory_target == 0.2
    assert mlm.baseline_peak_mib is None and mlm.memory_fraction is None  # memory=False


def test_mlm_row_counts_the_labelled_rows(result):
    labelled, rows = result.rows[1].name.split(" rows labelled")[0].split()[-1].split("/")
    assert int(rows) == result.config.head_rows
    assert 0.05 * int(rows) < int(labelled) < 0.3 * int(rows)  # about 15% of them


def test_packing_rows_compare_tokens_per_cpu_second(result):
    grouped, flattened = result.rows[3:]
    assert grouped.baseline_times == flattened.baseline_times  # one padded baseline, timed once
    assert "group_texts" in grouped.candidate and "flattened" in flattened.candidate
    assert grouped.baseline.startswith("padded")
    # padded and flattened hold the same real tokens: their ratio is one of times
    assert flattened.speedup == pytest.approx(flattened.baseline_s / flattened.candidate_s)
    assert grouped.speedup > 0 and grouped.max_abs_diff is None


def test_candidates_agree_with_dense(result):
    for r in result.rows[1:3]:  # loss and gradients checked inside the benchmark
        assert r.max_abs_diff is not None and r.max_abs_diff < 1e-4


def _row(**fields) -> BenchRow:
    base = dict(name="x", baseline="a", candidate="b", baseline_s=2.0, candidate_s=1.0)
    return BenchRow(**{**base, "speedup": 2.0, "speedup_target": 1.5, **fields})


def test_met_needs_both_targets() -> None:
    assert _row().met
    assert not _row(speedup=1.4).met
    assert not _row(memory_target=0.2).met  # a memory target without a measurement
    assert not _row(memory_target=0.2, memory_fraction=0.3).met
    assert _row(memory_target=0.2, memory_fraction=0.1).met


def test_table_and_json(result):
    table = format_table(result)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["benchmark", "baseline", "candidate"]
    for r, line in zip(result.rows, lines[2:7]):
        assert line.startswith(r.name) and f"{r.speedup:.2f}x" in line
        assert line.rstrip().endswith("yes" if r.met else "NO")
    data = json.loads(json.dumps(result.to_dict()))
    assert [row["met"] for row in data["rows"]] == [r.met for r in result.rows]
    assert data["config"] == BenchConfig.tiny(memory=False).__dict__


def test_plot(result, tmp_path):
    path = tmp_path / "bench.png"
    bench.plot_results(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_quick_writes_only_where_asked(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--quick", "--no-memory", "--repeats", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "speed-up" in printed and "masking" in printed
    assert json.loads(out.read_text())["config"]["repeats"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_run_benchmarks_rejects_wrong_config_type():
    with pytest.raises(TypeError, match="config must be a BenchConfig"):
        run_benchmarks({"repeats": 1})
