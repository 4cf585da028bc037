"""Retry by itself (`start --retries N`, issue 18) against the real sshd: the wrapper on
the host tries a failed attempt again, from its newest complete checkpoint, with no
client connected; it gives up on what repeating cannot fix; a stop during its wait ends it."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.runs import checkpoints
from rtrain_tui.core.runs.index import RunIndex, parse_time
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts
from tests.test_cli_runs import wait_state
from tests.test_resume_sshd import marked, wait_for
from tests.unit.test_retry_rule import listing


def start(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str,
          base: str = "", **cfg: object) -> None:
    """Start with --gpus 0; `base`: the retry wait's base in seconds (else the real 30 s)."""
    config = write_config(tmp_path / f"{run_id}.yaml", step_seconds=0.02, **cfg)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", "--gpus", "0", *extra,
            env={retry_rule.BASE_ENV: base} if base else None)
    assert r.rc == 0, r.err


def test_a_retry_resumes_from_the_newest_checkpoint_with_no_client_connected(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "t1"
    # Saves checkpoint-2, dies of an NCCL timeout at step 3, once; base 0.5 s: waits 1 s.
    start(cli, tmp_path, workdir, "t1", "--retries", "2", base="0.5",
          steps=5, save_steps=2, crash_at=3, crash="nccl_timeout", crash_once=True)
    # No client runs from here on: only the host acts. Watch its files.
    wait_for("the run to end", lambda: (run / "status").exists(), timeout=60)
    assert (run / "status").read_text().strip() == "0"
    assert (run / ".rtrain" / "attempts" / "1" / "status").read_text().strip() == "134"
    log = (run / "train.log").read_text()
    before, sep, after = log.partition("=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    assert sep and "Watchdog caught collective operation timeout" in before
    assert "Continuing training from global step 2" in after and "training done, exit 0" in after
    assert "env RTRAIN_RESUME_FROM=outputs/checkpoint-2" in after
    records = [json.loads(line) for line in (run / ".rtrain" / "attempts.jsonl").read_text().splitlines()]
    assert records[0]["attempt"] == 1 and records[0]["reason"] == (
        "NCCL timeout: ALLREDUCE collective did not finish after 600 s")
    assert (records[1]["attempt"], records[1]["checkpoint"]) == (2, "outputs/checkpoint-2")

    # A fresh index (another laptop, later) reads it as the host tells it.
    other = Cli(cli.hosts, tmp_path / "other.toml")
    got = json.loads(other("status", "gpu", "t1", "--workdir", workdir, "--json").out)
    assert got["state"] == "completed" and got["attempt"] == 2
    assert [(a["attempt"], a["exit"], a["checkpoint"]) for a in got["attempts"]] == [
        (1, 134, None), (2, 0, "outputs/checkpoint-2")]


def test_a_missing_module_is_not_retried_and_its_reason_says_why(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "t2"
    start(cli, tmp_path, workdir, "t2", "--retries", "3", base="0",
          steps=5, crash_at=2, crash="module")
    wait_state(cli, "t2", workdir, "failed (exit 1)", timeout=60)
    assert sorted(os.listdir(run / ".rtrain" / "attempts")) == ["1"]  # no attempt 2
    assert "=== attempt 2" not in (run / "train.log").read_text()
    got = json.loads(cli("status", "gpu", "t2", "--workdir", workdir, "--json").out)
    assert got["reason"] == ("missing Python module peft: pip install peft on the host "
                             "(not retried: repeating cannot fix it)")


def test_retries_give_up_after_the_last_attempt_and_say_so(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "t3"
    start(cli, tmp_path, workdir, "t3", "--retries", "1", base="0",
          steps=5, crash_at=2, crash="nccl_timeout")
    wait_state(cli, "t3", workdir, "failed (exit 134)", timeout=60)
    assert (run / "train.log").read_text().count("Watchdog caught collective operation timeout") == 2
    got = json.loads(cli("status", "gpu", "t3", "--workdir", workdir, "--json").out)
    assert got["reason"] == ("NCCL timeout: ALLREDUCE collective did not finish after "
                             "600 s (gave up after 2 attempts)")


def test_a_stop_during_the_retry_wait_ends_the_run_with_no_further_attempt(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "t4"
    start(cli, tmp_path, workdir, "t4", "--retries", "2", steps=5, crash_at=2, crash="nccl_timeout")
    wait_state(cli, "t4", workdir, "queued", timeout=60)
    got = json.loads(cli("status", "gpu", "t4", "--workdir", workdir, "--json").out)
    assert got["reason"] == ("retrying in 60 s after NCCL timeout: ALLREDUCE collective "
                             "did not finish after 600 s (attempt 2 of 3)")
    token = (run / "train.token").read_text().strip()
    r = cli("stop", "gpu", "t4", "--workdir", workdir)
    assert r.rc == 0, r.err
    assert r.out.strip().endswith("stopped t4 on gpu")
    assert cli("status", "gpu", "t4", "--workdir", workdir).out == "stopped\n"
    assert marked(token) == []
    assert "=== attempt 2" not in (run / "train.log").read_text()
    assert not (run / "retry_wait").exists() and not list(run.glob(".rtrain/attempts/*/retry_wait"))


def test_a_run_lost_to_a_reboot_is_resumed_by_the_next_refresh_with_retries_left(
        hosts: SshHosts, tmp_path: Path) -> None:
    """The reboot stand-in: every process of the run SIGKILLed (the wrapper too, so no
    exit code is written) and the host's boot id changed, through the test-only
    RTRAIN_TEST_BOOT_ID_FILE that only this host's sshd sets (see liveness.sh)."""
    boot = tmp_path / "boot_id"
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text() + hosts.extra_host(
        "rebooting", sftp="Subsystem sftp internal-sftp\n",
        extra_env={"RTRAIN_TEST_BOOT_ID_FILE": str(boot)}))
    cli = Cli(replace(hosts, ssh_config=config), tmp_path / "runs.toml")
    workdir = str(tmp_path / "work")
    cfg = write_config(tmp_path / "t5.yaml", steps=10000, step_seconds=0.05, save_steps=2)
    r = cli("start", "rebooting", "-c", str(cfg), "--workdir", workdir, "--run-id", "t5",
            "--no-follow", "--gpus", "0", "--retries", "1")
    assert r.rc == 0, r.err
    run = Path(workdir) / "t5"
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    token = (run / "train.token").read_text().strip()
    try:
        for pid in marked(token):
            os.kill(pid, signal.SIGKILL)
        wait_for("the run's processes to go", lambda: marked(token) == [])
        boot.write_text("00000000-0000-4000-8000-000000000000\n")
        newest = checkpoints.newest_complete(checkpoints.judge(
            checkpoints.parse_listing(listing(run), "MK"))).checkpoint
        assert newest is not None

        r = cli("runs", "--refresh")
        assert r.rc == 0, r.err
        assert r.err == ("rtrain-tui: t5 on rebooting was lost to a reboot of the host; resumed "
                         f"it: attempt 2, from {newest.path}\n")
        assert "running" in next(line for line in r.out.splitlines() if "t5" in line)
        log = (run / "train.log").read_text()
        assert "=== attempt 2: resuming from " in log
        first = json.loads((run / ".rtrain" / "attempts.jsonl").read_text().splitlines()[0])
        assert (first["attempt"], first["state"], first["reason"]) == (1, "lost", "lost: the host rebooted")

        # Its one retry is spent: lost to a second reboot, it stays lost.
        token = (run / "train.token").read_text().strip()
        for pid in marked(token):
            os.kill(pid, signal.SIGKILL)
        wait_for("the run's processes to go", lambda: marked(token) == [])
        boot.write_text("11111111-0000-4000-8000-000000000000\n")
        r = cli("runs", "--refresh")
        assert r.rc == 0 and r.err == "", r.err
        assert "lost" in next(line for line in r.out.splitlines() if "t5" in line)
    finally:
        for pid in marked((run / "train.token").read_text().strip()):
            os.kill(pid, signal.SIGKILL)


def stall_start(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str,
                **cfg: object) -> None:
    """Start a run that stalls after 3 s of silence (the log's age is read in whole
    seconds: 1 s could be 0.05 s), looked at every 0.2 s."""
    config = write_config(tmp_path / f"{run_id}.yaml", step_seconds=0.05, **cfg)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", "--gpus", "0", "--stall-after", "3s", *extra,
            env={retry_rule.STALL_CHECK_ENV: "0.2", retry_rule.BASE_ENV: "0"})
    assert r.rc == 0, r.err


def test_a_silent_run_reads_running_with_a_stall_reason(cli: Cli, tmp_path: Path, workdir: str) -> None:
    stall_start(cli, tmp_path, workdir, "s1", steps=100, hang_at=3)
    wait_for("the stall", lambda: json.loads(
        cli("status", "gpu", "s1", "--workdir", workdir, "--json").out)["stalled_for"] is not None)
    got = json.loads(cli("status", "gpu", "s1", "--workdir", workdir, "--json").out)
    assert got["state"] == "running" and got["stalled_for"] >= 3
    assert got["reason"] == f"stalled: no output for {got['stalled_for']}s"
    r = cli("status", "gpu", "s1", "--workdir", workdir)
    assert r.out == "running\n" and r.err.startswith("rtrain-tui: s1 on gpu: stalled: no output for ")
    assert cli("stop", "gpu", "s1", "--workdir", workdir).rc == 0


def test_on_stall_restart_resumes_a_hung_run_from_its_checkpoint(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "s2"
    stall_start(cli, tmp_path, workdir, "s2", "--on-stall", "restart", "--retries", "1",
                steps=6, save_steps=2, hang_at=3, hang_once=True)
    wait_state(cli, "s2", workdir, "completed", timeout=60)
    log = (run / "train.log").read_text()
    before, sep, after = log.partition("=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    assert sep and "; restarting it (--on-stall restart)" in before
    assert "Continuing training from global step 2" in after and "training done, exit 0" in after
    first = json.loads((run / ".rtrain" / "attempts.jsonl").read_text().splitlines()[0])
    assert first["reason"].startswith("stalled: no output for ") and first["exit"] == 143


def test_on_stall_stop_stops_a_hung_run(cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "s3"
    stall_start(cli, tmp_path, workdir, "s3", "--on-stall", "stop", steps=100, hang_at=3)
    wait_state(cli, "s3", workdir, "stopped", timeout=60)
    assert "; stopping the run (--on-stall stop)" in (run / "train.log").read_text()
    assert marked((run / "train.token").read_text().strip()) == []
    # Who stopped it, and why, beside the word (it read a bare `stopped`, as a user's stop).
    r = cli("status", "gpu", "s3", "--workdir", workdir)
    assert r.out == "stopped\n" and r.err.startswith("rtrain-tui: s3 on gpu: stalled: no output for "), r.err
    assert json.loads(cli("status", "gpu", "s3", "--workdir", workdir, "--json").out)["reason"].startswith(
        "stalled: no output for ")


def test_on_stall_restart_needs_retries(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "s4.yaml")
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "s4",
            "--no-follow", "--gpus", "0", "--on-stall", "restart")
    assert (r.rc, r.err) == (1, "rtrain-tui: --on-stall restart needs --retries N (each restart "
                                "counts as one retry), e.g. --retries 2.\n")


def test_on_stall_stop_or_restart_with_stall_after_0_is_refused_before_the_host(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "s5.yaml")
    for choice in ("stop", "restart"):
        r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "s5",
                "--no-follow", "--gpus", "0", "--retries", "1", "--stall-after", "0",
                "--on-stall", choice)
        assert (r.rc, r.err) == (1, f"rtrain-tui: --on-stall {choice} never acts with --stall-after 0 "
                                    "(never stalled): give --stall-after a duration, e.g. 20m.\n")
    assert not Path(workdir).exists()


def test_a_run_whose_gpus_stay_idle_reads_running_with_that_reason(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The stand-in nvidia-smi says GPU 0 is 0% busy: the run on it logs on, but its GPU
    idles (here for 1 s: RTRAIN_GPUS_IDLE_S; 10 minutes by default)."""
    config = write_config(tmp_path / "g1.yaml", steps=10000, step_seconds=0.05)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "g1",
            "--no-follow", "--gpu-ids", "0", "--stall-after", "1h",
            env={retry_rule.STALL_CHECK_ENV: "0.2", retry_rule.GPUS_IDLE_ENV: "1"})
    assert r.rc == 0, r.err
    wait_for("the idle GPUs", lambda: json.loads(
        cli("status", "gpu", "g1", "--workdir", workdir, "--json").out)["gpus_idle_for"] is not None)
    got = json.loads(cli("status", "gpu", "g1", "--workdir", workdir, "--json").out)
    assert got["state"] == "running" and got["stalled_for"] is None
    assert got["reason"] == f"GPUs idle for {got['gpus_idle_for']}s"
    assert cli("stop", "gpu", "g1", "--workdir", workdir).rc == 0


def test_runs_costs_and_status_leave_a_host_retrys_wait_out_and_agree_to_the_cent(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The retry loop records when attempt 2 began running and how long it waited (base
    3 s); a refresh keeps the wait in the index, so `runs` and `costs` (index only)
    leave it out, as `status --json` does from attempts.jsonl."""
    config = cli.hosts.home / ".config" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[hosts.gpu]\nprice_per_hour = 3600\n", encoding="utf-8")  # $1 a second
    try:
        run = Path(workdir) / "rc"
        # One GPU (the later --gpus wins): a run that holds none costs nothing.
        start(cli, tmp_path, workdir, "rc", "--retries", "1", "--gpus", "1", base="3",
              steps=80, save_steps=10, crash_at=55, crash="nccl_timeout", crash_once=True)
        wait_for("the run to end", lambda: (run / "status").exists(), timeout=60)
        assert cli("runs", "--refresh").rc == 0
        got = json.loads(cli("status", "gpu", "rc", "--workdir", workdir, "--json").out)
        assert got["state"] == "completed" and got["attempt"] == 2, got
        # The index keeps what the host's attempts ran (status records it: the wait between
        # them is no part of it), ended by the host's clock: the retry's wait is not billed.
        record = RunIndex(cli.index).get("gpu", "rc")
        assert record is not None
        began, ended = parse_time(record.started_at), parse_time(record.ended_at)
        assert began is not None and ended is not None
        assert got["cost"] <= (ended - began).total_seconds() - 3, (got, record)
        listed = [r["cost"] for r in json.loads(cli("runs", "--json").out) if r["run_id"] == "rc"]
        spent = json.loads(cli("costs", "--json").out)["total"]
        assert got["cost"] > 0 and listed == [got["cost"]] and spent == [{"cost": got["cost"], "currency": "$"}], (
            listed, spent, got["cost"])
    finally:
        config.unlink(missing_ok=True)
