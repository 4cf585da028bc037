"""`tail` and `start --follow` under real faults: a real CLI, a real sshd, our proxy between.

Each case asserts what the user relies on: every log line shown exactly once (compared
with train.log on the host), the right exit code, following again within 3 s of the
host answering, a permanent failure ending at once in one line, never a traceback.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.faults.conftest import ALIAS, ProxyCli, Stream, lost_and_duplicated
from tests.faults.proxy import FaultProxy

RESUME_BOUND = 3.0  # seconds from the host answering again to lines flowing again


def start_run(pcli: ProxyCli, tmp_path: Path, workdir: str, run_id: str, steps: int,
              step_seconds: float = 0.05) -> None:
    """Launch directly on `gpu` (not through the proxy): the faults are for the follower."""
    config = write_config(tmp_path / f"{run_id}.yaml", steps=steps, step_seconds=step_seconds)
    r = pcli.run("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
                 "--no-follow")
    assert r.returncode == 0, r.stderr


def log_of(workdir: str, run_id: str) -> list[str]:
    return (Path(workdir) / run_id / "train.log").read_text().splitlines()


def check_clean(stream: Stream) -> None:
    assert not any("Traceback" in line for line in stream.err_lines), stream.err_lines


@pytest.mark.serial
def test_tail_resumes_after_an_sshd_restart_and_a_killed_session_with_every_line_once(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(1)+(3) tail: sshd restarted, then session killed",
                    "refuse 1 s + cut; later cut once")
    start_run(pcli, tmp_path, workdir, "restart", steps=140)
    tail = pcli.stream("tail", ALIAS, "restart", "--workdir", workdir)
    tail.wait_for(lambda lines: sum("'step':" in x for x in lines) >= 10)
    proxy.refuse(1.0)  # sshd restarting: every connection dropped, the port closed for 1 s
    time.sleep(1.0)
    up = time.monotonic()
    seen = tail.steps_seen()
    tail.wait_for(lambda lines: sum("'step':" in x for x in lines) >= seen + 10)
    first_wait = tail.first_output_after(up)
    proxy.cut()  # one session killed mid-tail
    cut = time.monotonic()
    rc = tail.finish()
    shown, log = tail.lines[:-1], log_of(workdir, "restart")
    row.lost, row.duplicated = lost_and_duplicated(shown, log)
    row.max_wait = max(w for w in (first_wait, tail.first_output_after(cut)) if w is not None)
    row.bound = RESUME_BOUND
    check_clean(tail)
    assert rc == 0 and tail.lines[-1] == f"restart on {ALIAS}: completed", tail.err_lines
    assert shown == log
    assert sum("reconnecting" in line for line in tail.err_lines) >= 2, tail.err_lines
    assert row.max_wait is not None and row.max_wait < RESUME_BOUND
    assert proxy.accepted >= 3  # it really did reconnect, twice


@pytest.mark.serial
def test_start_follow_survives_an_sshd_restart_with_every_line_once(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(1) start --follow: sshd restarted", "refuse 1.5 s after launch")
    config = write_config(tmp_path / "c.yaml", steps=100, step_seconds=0.05, exit_code=3)
    follow = pcli.stream("start", ALIAS, "-c", str(config), "--workdir", workdir, "--run-id", "sf")
    follow.wait_for(lambda lines: sum("'step':" in x for x in lines) >= 5)
    proxy.refuse(1.5)
    time.sleep(1.5)
    up = time.monotonic()
    rc = follow.finish()
    shown, log = follow.lines[3:-1], log_of(workdir, "sf")
    row.lost, row.duplicated = lost_and_duplicated(shown, log)
    row.max_wait, row.bound = follow.first_output_after(up), RESUME_BOUND
    check_clean(follow)
    assert follow.lines[0] == f"started sf on {ALIAS}"
    assert rc == 1 and follow.lines[-1] == f"sf on {ALIAS}: failed (exit 3)", follow.err_lines
    assert shown == log
    assert row.max_wait is not None and row.max_wait < RESUME_BOUND


@pytest.mark.serial
def test_tail_follows_again_within_3s_after_a_20s_outage(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(4) tail: host gone 20 s, then back", "refuse 20 s")
    start_run(pcli, tmp_path, workdir, "outage", steps=520)
    tail = pcli.stream("tail", ALIAS, "outage", "--workdir", workdir)
    tail.wait_for(lambda lines: sum("'step':" in x for x in lines) >= 5)
    proxy.refuse()
    time.sleep(20)
    assert tail.proc.poll() is None, "tail gave up during the outage"
    up = time.monotonic()
    proxy.allow()
    tail.wait_for(lambda lines: tail.first_output_after(up) is not None, timeout=15)
    rc = tail.finish()
    shown, log = tail.lines[:-1], log_of(workdir, "outage")
    row.lost, row.duplicated = lost_and_duplicated(shown, log)
    row.max_wait, row.bound = tail.first_output_after(up), RESUME_BOUND
    check_clean(tail)
    assert rc == 0 and tail.lines[-1] == f"outage on {ALIAS}: completed", tail.err_lines
    assert shown == log
    # one notice per change of reason, not one per retry
    assert sum("reconnecting" in line for line in tail.err_lines) <= 4, tail.err_lines
    assert row.max_wait is not None and row.max_wait < RESUME_BOUND


@pytest.mark.serial
def test_tail_rides_out_a_frozen_host_and_follows_again_within_3s(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(4) tail: host frozen 6 s (SIGSTOP)", "stall 6 s, resume")
    start_run(pcli, tmp_path, workdir, "frozen", steps=240)
    tail = pcli.stream("tail", ALIAS, "frozen", "--workdir", workdir)
    tail.wait_for(lambda lines: sum("'step':" in x for x in lines) >= 5)
    proxy.stall()
    time.sleep(6)  # past the 3 missed keepalives that declare the link dead
    up = time.monotonic()
    proxy.resume()
    tail.wait_for(lambda lines: tail.first_output_after(up) is not None, timeout=15)
    rc = tail.finish()
    shown, log = tail.lines[:-1], log_of(workdir, "frozen")
    row.lost, row.duplicated = lost_and_duplicated(shown, log)
    row.max_wait, row.bound = tail.first_output_after(up), RESUME_BOUND
    check_clean(tail)
    assert rc == 0 and tail.lines[-1] == f"frozen on {ALIAS}: completed", tail.err_lines
    assert shown == log
    assert row.max_wait is not None and row.max_wait < RESUME_BOUND


def test_tail_through_a_slow_link_shows_every_line_once(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("tail: slow link, cut mid-replay", "throttle 64 KiB/s + cut")
    start_run(pcli, tmp_path, workdir, "slow", steps=4000, step_seconds=0)
    proxy.throttle(64 * 1024)
    tail = pcli.stream("tail", ALIAS, "slow", "--workdir", workdir)
    tail.wait_for(lambda lines: sum("'step':" in x for x in lines) >= 100)
    proxy.cut()
    proxy.throttle(None)
    rc = tail.finish()
    shown, log = tail.lines[:-1], log_of(workdir, "slow")
    row.lost, row.duplicated = lost_and_duplicated(shown, log)
    check_clean(tail)
    assert rc == 0 and shown == log, tail.err_lines


@pytest.mark.serial
def test_tail_of_a_host_whose_key_changed_exits_1_at_once_naming_the_fix(
        pcli: ProxyCli, proxy: FaultProxy, tmp_path: Path, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(9) tail: host key changed", "other key in known_hosts")
    (tmp_path / "known_hosts").write_text(
        f"[127.0.0.1]:{proxy.port} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIHb+vY5WLcM6cbkJ4YbXU2p6zq3r8GgS4H1RkZJdS0rA\n")
    began = time.monotonic()
    r = pcli.run("tail", ALIAS, "any", "--workdir", workdir, timeout=60)
    row.max_wait, row.bound = time.monotonic() - began, 10.0
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"rtrain-tui: cannot reach {ALIAS}: its host key changed. If the host was reinstalled, "
        f"remove line 1 of {tmp_path / 'known_hosts'} and try again."], r.stderr
    assert row.max_wait < 10


@pytest.mark.serial
def test_tail_of_a_name_that_is_no_alias_and_does_not_resolve_exits_1_at_once(
        pcli: ProxyCli, workdir: str, fault_row) -> None:  # type: ignore[no-untyped-def]
    row = fault_row("(9) tail: no such host (typo)", "alias not in config, name not in DNS")
    began = time.monotonic()
    r = pcli.run("tail", "nosuchhost.invalid", "any", "--workdir", workdir, timeout=60)
    row.max_wait, row.bound = time.monotonic() - began, 10.0
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rtrain-tui: ") and "nosuchhost.invalid" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert row.max_wait < 10
