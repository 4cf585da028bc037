"""The metrics cache: a reopened run resumes where it was; a bad cache is parsed again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtrain_tui.core.metrics import metrics_cache
from rtrain_tui.core.metrics.metrics import MetricsParser
from rtrain_tui.core.metrics.metrics_cache import CachedMetrics, cache_path, default_cache_dir

LOG = b"  Total optimization steps = 100\n\r 10%|#  | 10/100 [00:10<01:30,  1.00it/s]{'loss': 2.5, 'epoch': 0.1}\n"


def test_round_trip_keeps_offset_and_series(tmp_path: Path) -> None:
    parser = MetricsParser()
    parser.feed(LOG)
    path = cache_path(tmp_path, "gpu", "~/.praisonai-train", "run-1")
    metrics_cache.save(path, CachedMetrics(len(LOG), parser))
    got = metrics_cache.load(path)
    assert got is not None and got.offset == len(LOG)
    assert got.parser.losses == [(10, 2.5)] and got.parser.summary() == parser.summary()


def test_cache_lives_under_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "rtrain-tui" / "metrics"


def test_each_run_and_host_has_its_own_file(tmp_path: Path) -> None:
    paths = {cache_path(tmp_path, h, w, r) for h, w, r in [
        ("gpu", "~/w", "run-1"), ("gpu2", "~/w", "run-1"), ("gpu", "/other", "run-1"),
        ("gpu", "~/w", "run-2"), ("rented box; rm -rf", "~/w", "run-1")]}
    assert len(paths) == 5 and all(p.parent == tmp_path for p in paths)


@pytest.mark.parametrize("junk", [
    b"", b"not json", b"[]", b'{"offset": 5}', b'{"offset": -1, "state": {}}',
    b'{"offset": "x", "state": {}}', b"\xff\xfe garbage",
])
def test_corrupt_cache_is_discarded_not_a_crash(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(junk)
    assert metrics_cache.load(path) is None
    assert not path.exists()


@pytest.mark.parametrize("mangle", [
    lambda st: st.update(losses=["not base64!", ""]),
    lambda st: st.update(losses=[MetricsParser().to_state()["losses"][0], "AAAA"]),  # 3 bytes: no double
    lambda st: st.update(losses=[st["losses"][0], MetricsParser().to_state()["losses"][1]]),  # 1 step, 0 values
    lambda st: st.update(final=[1, 2]),
    lambda st: st.pop("interval"),
])
def test_cache_with_mangled_state_is_discarded(tmp_path: Path, mangle) -> None:  # type: ignore[no-untyped-def]
    parser = MetricsParser()
    parser.feed(LOG)
    path = tmp_path / "run.json"
    metrics_cache.save(path, CachedMetrics(len(LOG), parser))
    data = json.loads(path.read_text())
    mangle(data["state"])
    path.write_text(json.dumps(data))
    assert metrics_cache.load(path) is None


def test_unwritable_cache_dir_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    metrics_cache.save(blocker / "sub" / "run.json", CachedMetrics(0, MetricsParser()))
    assert not (blocker / "sub").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_jsonl_offset_round_trips_and_an_old_file_without_it_reads_as_zero(tmp_path: Path) -> None:
    parser = MetricsParser()
    parser.feed(LOG)
    parser.feed_jsonl(b'{"step": 10, "loss": 2.4}\n')
    path = tmp_path / "run.json"
    metrics_cache.save(path, CachedMetrics(len(LOG), parser, 26))
    got = metrics_cache.load(path)
    assert got is not None and (got.offset, got.jsonl_offset) == (len(LOG), 26)
    assert got.parser.losses == [(10, 2.4)] and got.parser.log_losses == [(10, 2.5)]
    data = json.loads(path.read_text())
    del data["jsonl_offset"], data["state"]["jsonl"]  # as the release before wrote it
    path.write_text(json.dumps(data))
    old = metrics_cache.load(path)
    assert old is not None and (old.offset, old.jsonl_offset) == (len(LOG), 0)
    assert old.parser.losses == [(10, 2.5)]


@pytest.mark.parametrize("mangle", [
    lambda d: d.update(jsonl_offset=-5),
    lambda d: d.update(jsonl_offset="x"),
    lambda d: d["state"].update(jsonl="junk"),
    lambda d: d["state"]["jsonl"].pop("skipping"),
    lambda d: d["state"]["jsonl"]["series"].update(losses=["AAAAAAAAAAA=", ""]),
])
def test_cache_with_a_mangled_jsonl_side_is_discarded(tmp_path: Path, mangle) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "run.json"
    metrics_cache.save(path, CachedMetrics(0, MetricsParser(), 0))
    data = json.loads(path.read_text())
    mangle(data)
    path.write_text(json.dumps(data))
    assert metrics_cache.load(path) is None
