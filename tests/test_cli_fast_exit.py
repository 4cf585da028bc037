"""The CLI's normal end skips the interpreter's shutdown (0.15-0.25 s a cold command), and
only when nothing can be lost by it: full output, the exit code, a thread's last writes."""

import subprocess
import sys
from pathlib import Path

from rtrain_tui.core.runs.index import RunIndex, RunRecord

# Runs the real entry point as the console script does, with a marker printed by the
# interpreter's shutdown (atexit) and, when asked, a thread that is still writing.
_ENTRY = ("import atexit, sys, threading\n"
          "atexit.register(lambda: print('SHUTDOWN RAN', file=sys.stderr))\n"
          "if sys.argv[1] == 'thread':\n"
          "    done = threading.Event()\n"
          "    def late():\n"
          "        done.wait(0.3)\n"
          "        print('THREAD WROTE', flush=True)\n"
          "    threading.Thread(target=late).start()\n"
          "sys.argv = ['rtrain-tui'] + sys.argv[2:]\n"
          "from rtrain_tui import main\n"
          "raise SystemExit(main())\n")


def _run(tmp_path: Path, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", _ENTRY, mode, *args], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=env)


def _index_with_runs(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    for i in range(count):
        index.add(RunRecord(host="gpu1", run_id=f"run-{i:04d}", workdir="~/w", state="running"))
    return path


def test_runs_ends_without_interpreter_shutdown_and_keeps_all_its_output(tmp_path: Path) -> None:
    index = _index_with_runs(tmp_path, 300)  # more than one pipe buffer of output
    r = _run(tmp_path, "plain", "--index", str(index), "runs")
    assert r.returncode == 0, r.stderr
    assert "SHUTDOWN RAN" not in r.stderr
    assert all(f"run-{i:04d}" in r.stdout for i in range(300))


def test_an_expected_failure_still_exits_1_with_its_line_and_no_shutdown(tmp_path: Path) -> None:
    r = _run(tmp_path, "plain", "--index", str(tmp_path / "runs.toml"), "runs", "--prune")
    assert r.returncode == 1
    assert r.stderr.startswith("rtrain-tui: ") and "--older-than" in r.stderr
    assert "SHUTDOWN RAN" not in r.stderr


def test_a_thread_still_running_gets_the_normal_shutdown(tmp_path: Path) -> None:
    index = _index_with_runs(tmp_path, 1)
    r = _run(tmp_path, "thread", "--index", str(index), "runs")
    assert r.returncode == 0, r.stderr
    assert "THREAD WROTE" in r.stdout and "run-0000" in r.stdout
    assert "SHUTDOWN RAN" in r.stderr
