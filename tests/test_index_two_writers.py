"""Two processes write one index of ten thousand runs at once (an older single-file index:
their first writes migrate it to monthly archives), and neither loses a run.

Moved out of tests/unit (tests/unit/test_index_archive.py holds the rest of the archive's
tests): it starts two Python processes that race on the index's lock, and each goes
through the ten thousand runs on every write (13 s of CPU); the fast lane starts nothing.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import tomli_w

from rtrain_tui.core.runs.index import RunIndex
from tests.unit.test_index_archive import _runs

_WRITER = """
import sys
from pathlib import Path
from rtrain_tui.core.runs.index import RunIndex, RunRecord, utc_now
index, me = RunIndex(Path(sys.argv[1])), sys.argv[2]
for i in range(10):
    rec = RunRecord(host="h01", run_id=f"{me}-{i}", workdir="~/w", state="running",
                    started_at=utc_now(), updated_at=utc_now())
    index.add(rec)
    if i % 2:
        index.set_states({rec.key: ("completed", False, utc_now())})
"""


def test_two_writers_with_ten_thousand_runs_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    old = _runs(10_000, first=datetime(2025, 12, 1, tzinfo=UTC), live=100)
    path.write_text(tomli_w.dumps({"runs": [dict(r.__dict__) for r in old]}))  # an older index
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who],
                              stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    got = {r.key: r for r in RunIndex(path).load()}
    assert len(got) == 10_020
    assert all(got[r.key] == r for r in old)
    assert {got[("h01", "~/w", f"{w}-{i}")].state for w in "ab" for i in range(1, 10, 2)} == {"completed"}
    assert {got[("h01", "~/w", f"{w}-{i}")].state for w in "ab" for i in range(0, 10, 2)} == {"running"}
