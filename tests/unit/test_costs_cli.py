"""`runs` (its COST column and `cost` field) and `costs`: what the index's runs cost,
from the index and config.toml alone (no host is asked)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtrain_tui import cli
from rtrain_tui.core.runs.index import RunIndex, RunRecord

NOW = datetime.now(UTC)


def ago(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[hosts.h100]\nprice_per_hour = 2.49\n[hosts.slurm]\nprice_per_gpu_hour = 1\n'
                      'currency = "€"\n', encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "runs.toml"
    RunIndex(path).add_new([
        # 2 h ago for 1 h: $2.49
        RunRecord("h100", "a", "~/w", state="completed", started_at=ago(3), ended_at=ago(2)),
        # ten days ago, 4 h: $9.96 (left out by --since 7d)
        RunRecord("h100", "old", "~/w", state="failed (exit 1)", started_at=ago(240),
                  ended_at=ago(236)),
        # 2 GPUs × 1.5 h × €1
        RunRecord("slurm", "b", "~/w", state="completed", gpus=2, started_at=ago(2),
                  ended_at=ago(0.5)),
        RunRecord("lab", "free", "~/w", state="completed", started_at=ago(2), ended_at=ago(1)),
    ])
    return path


def run(index: Path, capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = cli.main(["--index", str(index), *words])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_runs_has_a_cost_column_and_field_once_a_host_has_a_price(
        index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(index, capsys, "runs")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["HOST", "RUN", "STATE", "STARTED", "COST"]
    assert {line.split()[1]: line.split()[-1] for line in lines[1:]} == {
        "old": "$9.96", "a": "$2.49", "b": "€3.00", "free": "-"}
    code, out, _ = run(index, capsys, "runs", "--json")
    assert {r["run_id"]: (r["cost"], r["currency"]) for r in json.loads(out)} == {
        "old": (9.96, "$"), "a": (2.49, "$"), "b": (3.0, "€"), "free": (None, None)}


def test_runs_says_when_each_run_started_to_the_second_as_the_docs_show(
        index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The index keeps microseconds (its times order events); the table is read by people.
    code, out, _ = run(index, capsys, "runs")
    started = {line.split()[1]: line.split()[3] for line in out.splitlines()[1:]}
    assert code == 0
    assert started["a"] == (NOW - timedelta(hours=3)).replace(microsecond=0).isoformat()
    code, out, _ = run(index, capsys, "runs", "--json")
    assert {r["run_id"]: r["started_at"] for r in json.loads(out)}["a"] == ago(3)  # exact, for scripts


def test_costs_by_host_since_a_week_leaves_out_older_runs_and_says_what_has_no_price(
        index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(index, capsys, "costs", "--since", "7d")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["HOST", "RUNS", "COST"], ["h100", "1", "$2.49"], ["slurm", "1", "€3.00"],
        ["total", "in", "the", "last", "7d", "$2.49", "+", "€3.00"]]
    assert "1 run left out: their host has no price" in err
    code, out, _ = run(index, capsys, "costs", "--by", "run", "--since", "7d")
    assert [line.split() for line in out.splitlines()] == [
        ["RUN", "COST"], ["h100/a", "$2.49"], ["slurm/b", "€3.00"],
        ["total", "in", "the", "last", "7d", "$2.49", "+", "€3.00"]]
    code, out, _ = run(index, capsys, "costs", "--by", "run", "--json")
    got = json.loads(out)
    assert [(r["run"], r["cost"], r["currency"]) for r in got["rows"]] == [
        ("h100/a", 2.49, "$"), ("h100/old", 9.96, "$"), ("slurm/b", 3.0, "€")]
    assert got["total"] == [{"cost": 12.45, "currency": "$"}, {"cost": 3.0, "currency": "€"}]
    assert got["unpriced_runs"] == 1


def test_costs_by_day_splits_a_run_at_midnight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[hosts.h]\nprice_per_hour = 1\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "runs.toml"
    RunIndex(path).add_new([RunRecord("h", "night", "~/w", state="completed",
                                      started_at="2026-03-01T22:00:00+00:00",
                                      ended_at="2026-03-02T01:30:00+00:00")])
    code, out, _ = run(path, capsys, "costs", "--by", "day", "--json")
    assert code == 0 and [(r["day"], r["cost"]) for r in json.loads(out)["rows"]] == [
        ("2026-03-01", 2.0), ("2026-03-02", 1.5)]


def test_costs_with_a_bad_age_is_one_line(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(index, capsys, "costs", "--since", "a week")
    assert code == 1 and err == "rtrain-tui: --since 'a week' is not an age: a number and h, d or w (hours, days, weeks), e.g. 7d.\n"
