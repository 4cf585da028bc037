"""rtrain_tui.core (and the CLI's scripted commands) never import Textual."""

import json
import os
import subprocess
import sys
from pathlib import Path


def test_core_and_cli_import_without_textual() -> None:
    code = (
        "import sys, rtrain_tui.core, rtrain_tui.core.engine, rtrain_tui.core.transfers.transfer, "
        "rtrain_tui.core.logs.logstream, rtrain_tui.core.metrics.metrics, rtrain_tui.core.metrics.metrics_cache, "
        "rtrain_tui.core.metrics.metrics_sync, rtrain_tui.core.metrics.metrics_format, rtrain_tui.core.logs.reasons, "
        "rtrain_tui.core.logs.run_reason, rtrain_tui.core.host_view, rtrain_tui.cli\n"
        "print('textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# `runs` lists the index and asks no host: it must not pay for the engine, the event
# loop, the SSH library, rich or the config editor (issue 17: those imports were most
# of its 0.78 s).
# Run in a process of its own, so what the test process imported does not count.
LIST_RUNS = """
import io, contextlib, json, sys
from rtrain_tui import cli
out = {}
for words in (["runs"], ["runs", "--json"], ["runs", "--prune", "--older-than", "1d", "--dry-run"]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = cli.main(["--index", sys.argv[1], *words])
    out[" ".join(words)] = (code, text.getvalue())
heavy = ("asyncssh", "textual", "rich", "rtrain_tui.core.engine", "rtrain_tui.core.host_view",
         "rtrain_tui.core.transport.connection", "rtrain_tui.progress_view", "asyncio", "tomlkit")
out["loaded"] = sorted(m for m in sys.modules if m.startswith(heavy))
print(json.dumps(out))
"""


def test_runs_reads_the_index_without_importing_the_engine_ssh_or_rich(tmp_path: Path) -> None:
    from rtrain_tui.core.runs.index import RunIndex, RunRecord

    index = tmp_path / "runs.toml"
    RunIndex(index).add_new([
        RunRecord("gpu", "old-one", "~/w", state="completed", started_at="2026-01-01T00:00:00+00:00",
                  ended_at="2026-01-01T03:00:00+00:00", backend="direct"),
        RunRecord("login", "found-one", "~/w", state="running", origin="found",
                  started_at="2026-12-01T00:00:00+00:00"),
    ])
    # A found run with no backend recorded is what its host is configured as.
    (tmp_path / "config" / "rtrain-tui").mkdir(parents=True)
    (tmp_path / "config" / "rtrain-tui" / "config.toml").write_text('[hosts.login]\nbackend = "slurm"\n')
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    got = json.loads(subprocess.run([sys.executable, "-c", LIST_RUNS, str(index)], env=env,
                                    capture_output=True, text=True, check=True).stdout)
    assert got["loaded"] == []
    code, table = got["runs"]
    assert code == 0 and [line.split()[:3] for line in table.splitlines()] == [
        ["HOST", "RUN", "STATE"], ["gpu", "old-one", "completed"],
        ["login", "found-one", "running"]]
    code, listed = got["runs --json"]
    assert code == 0 and [(r["run_id"], r["backend"]) for r in json.loads(listed)] == [
        ("old-one", "direct"), ("found-one", "slurm")]
    code, pruned = got["runs --prune --older-than 1d --dry-run"]
    assert code == 0 and "old-one" in pruned and "found-one" not in pruned


def test_progress_without_a_terminal_draws_nothing_and_imports_no_rich() -> None:
    """A scripted `start` or `fetch` (stderr a pipe) shows no bar, so pays no rich import."""
    code = ("import sys\nfrom rtrain_tui.progress_view import TerminalProgress\n"
            "with TerminalProgress() as progress:\n    progress.update('d.jsonl', 5, 10)\n"
            "print(sorted(m for m in sys.modules if m.startswith('rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (out.stdout.strip(), out.stderr) == ("[]", "")


def test_the_engine_does_not_import_urllib_until_a_notification_is_sent() -> None:
    """urllib.request (http.client, email, ssl) is paid by a command only when it posts."""
    code = ("import sys, rtrain_tui.cli, rtrain_tui.core.engine\n"
            "print(sorted(m for m in ('urllib.request', 'http.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
