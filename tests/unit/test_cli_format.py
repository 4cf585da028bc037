"""`runs` output formats, kept exactly as the standard library writes them while made cheaper."""

from __future__ import annotations

import json

from rtrain_tui.cli.runs import json_rows


def test_runs_json_is_json_dumps_with_indent_2_byte_for_byte() -> None:
    rows: list[dict[str, str | bool | None]] = [
        {"host": "gpu", "run_id": "run-1", "stale": False, "ended_at": "", "slurm_job_id": None},
        {"host": 'q"uote\\back', "run_id": "ünï, cödé\n", "stale": True, "slurm_job_id": "12"},
    ]
    assert json_rows(rows) == json.dumps(rows, indent=2)
    assert json_rows([]) == json.dumps([], indent=2)
