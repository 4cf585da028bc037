"""The host's own message (core/notify/host_send.py): notify.pyz runs on a bare Python, and
words a run's end as a client would, its cost from the attempts' time."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from rtrain_tui.core import host
from rtrain_tui.core.notify import host_send, notifier
from rtrain_tui.core.runs import cost, hostconfig
from rtrain_tui.core.runs.index import RunRecord

LOG = ("{'loss': 2.5, 'learning_rate': 1e-4, 'epoch': 0.1, 'step': 3}\n"
       "  2%|▏         | 3/150 [00:03<02:30,  1.0s/it]\n"
       "Traceback (most recent call last):\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")


def test_notify_pyz_runs_on_a_python_with_nothing_of_ours_installed(tmp_path: Path) -> None:
    (tmp_path / host_send.PROGRAM).write_bytes(host.bundle(*host_send.MODULES))
    (tmp_path / host_send.SETTINGS).write_bytes(host_send.settings("gpu", "r1", ["mailto://x@y"], 1.0))
    (tmp_path / "train.log").write_text(LOG)
    for argv in (["failed", "1"], ["test", "gpu"]):
        # -S as well: without `site`, this venv's rtrain-tui is not importable either.
        done = subprocess.run([sys.executable, "-I", "-S", host_send.PROGRAM, *argv], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # no URL it can send
    assert json.loads((tmp_path / host_send.SETTINGS).read_text())["urls"] == []


def test_the_hosts_message_is_worded_as_a_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.log").write_text(LOG)
    config = json.loads(host_send.settings("gpu", "r1", ["ntfy://t"], 1_000.0, Decimal("3600")))
    mine = host_send.compose(config, "failed", 1, 1_090.0)
    record = RunRecord(host="gpu", run_id="r1", workdir="/w", python="python3", state="running",
                       started_at=datetime.fromtimestamp(1_000, UTC).isoformat(),
                       updated_at="", ended_at=datetime.fromtimestamp(1_090, UTC).isoformat())
    price = hostconfig.Price(Decimal("3600"))
    theirs = notifier.compose(notifier.Seen(record, "failed (exit 1)"),
                              hostconfig.HostConfig({"gpu": hostconfig.HostSettings(price=price)}),
                              datetime.fromtimestamp(1_090, UTC), LOG)
    assert mine is not None and theirs is not None
    assert (mine.title, mine.body) == (theirs.title, theirs.body)
    assert "reason: CUDA out of memory" in mine.body and "cost $90.00" in mine.body
    assert cost.money(Decimal("1234.505")) == host_send._Spent(Decimal("1234.505"), "$").text()


def test_a_stopped_run_and_a_stall_are_worded_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = json.loads(host_send.settings("gpu", "r1", [], 1_000.0))
    (tmp_path / "stop_requested").write_text("nonce\n")
    stopped = host_send.compose(config, "stopped", 143, 1_010.0)
    assert stopped is not None and stopped.title == "rtrain-tui: r1 on gpu stopped"
    # R02: the trainer answered our stop's TERM with exit 1 (torchrun, Lightning): stopped
    answered = host_send.compose(config, "stopped", 1, 1_010.0)
    assert answered is not None and answered.title == "rtrain-tui: r1 on gpu stopped"
    stalled = host_send.compose(config, "stalled", 1_020, 2_000.0)
    assert stalled is not None and stalled.title == "rtrain-tui: r1 on gpu stalled: no output for 17m"


def test_billed_time_is_the_attempts_time_not_the_gaps_between_them() -> None:
    attempts = [{"attempt": 1, "started": 1_000, "ended": 1_100}, {"attempt": 2, "started": 1_200}]
    assert host_send.billed_seconds(1_000, attempts, 1_300) == 200
    # A queued run counts from when it got its GPUs.
    assert host_send.billed_seconds(1_000, [{"attempt": 1, "launched": 1_050}], 1_300) == 250
    assert host_send.billed_seconds(1_000, [], 1_300) == 300


# A Python 3.7 stand-in: it runs, but notify.pyz's syntax (`:=`, 3.8) is beyond it.
OLD_PYTHON = """#!/bin/sh
case "$1" in *.pyz) echo '  if found := _NTFY.fullmatch(url):' >&2; echo 'SyntaxError: invalid syntax' >&2; exit 1;; esac
exec python3 "$@"
"""


@pytest.mark.parametrize(("python", "claimed"), [(sys.executable, True), ("/nonexistent/python3", False),
                                                 ("python3.7", False)])
def test_the_wrapper_claims_the_end_only_with_a_python_that_can_send_it(tmp_path: Path, python: str,
                                                                         claimed: bool) -> None:
    from rtrain_tui.core.backends.direct import scripts
    from rtrain_tui.core.host import unattended

    if python == "python3.7":
        python = str(tmp_path / "python3.7")
        Path(python).write_text(OLD_PYTHON)
        Path(python).chmod(0o755)

    (tmp_path / host_send.PROGRAM).write_bytes(host.bundle(*host_send.MODULES))
    (tmp_path / host_send.SETTINGS).write_bytes(host_send.settings("gpu", "r1", [], 1.0))
    # As the wrapper sends it: after attempt.sh, which says which attempt's marker it is.
    script = (unattended.ATTEMPT + scripts._notify(scripts.Notify(python, ("failed",)))
              + 'rt_notify_end 1\nrt_notify_end 0\n')
    subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, check=True, timeout=60)
    # Only what the user wants is claimed (`completed` is not among the events here).
    assert [p.name for p in (tmp_path / "notified").glob("*")] == (["a1-failed"] if claimed else [])


def test_the_wrappers_end_tells_a_stop_of_ours_as_stopped_whatever_the_exit_code(tmp_path: Path) -> None:
    """R02: the event the wrapper claims is the state rule's word (its shell copy): with
    `stop_requested` on record, exit 1 is our stop, told as `stopped` if that is wanted
    and by no one if not; without it, exit 1 is a failure."""
    from rtrain_tui.core.backends.direct import scripts
    from rtrain_tui.core.host import unattended

    (tmp_path / host_send.PROGRAM).write_bytes(host.bundle(*host_send.MODULES))
    (tmp_path / host_send.SETTINGS).write_bytes(host_send.settings("gpu", "r1", [], 1.0))
    (tmp_path / "stop_requested").write_text("nonce\n")
    for events in (("failed",), ("failed", "stopped")):
        # As the wrapper sends it: after attempt.sh, which says which attempt's marker it is.
        script = (unattended.ATTEMPT + scripts._notify(scripts.Notify(sys.executable, events))
                  + "rt_notify_end 1\n")
        subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, check=True, timeout=60)
    assert [p.name for p in (tmp_path / "notified").glob("*")] == ["a1-stopped"]
    (tmp_path / "stop_requested").unlink()
    (tmp_path / "notified" / "a1-stopped").rmdir()
    script = (unattended.ATTEMPT + scripts._notify(scripts.Notify(sys.executable, ("failed", "stopped")))
              + "rt_notify_end 1\n")
    subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, check=True, timeout=60)
    assert [p.name for p in (tmp_path / "notified").glob("*")] == ["a1-failed"]
