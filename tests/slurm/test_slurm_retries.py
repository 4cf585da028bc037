"""`start --retries N` on the real test Slurm (issue 18): the job's batch script runs the
trainer inside the box's retry loop (core/host/retry.sh), so a failed attempt is resumed
within the same job, on the GPUs it holds; the attempt count is the run's, not Slurm's
requeue count; while the loop waits the run reads `queued` with why, as on a box."""

from __future__ import annotations

import json
from pathlib import Path

from rtrain_tui.core.logs import retry_rule
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import status, wait_for

NCCL = "NCCL timeout: ALLREDUCE collective did not finish after 600 s"


def start(scli: SlurmCli, tmp_path: Path, workdir: str, run_id: str, *flags: str,
          base: str = "", **cfg: object) -> str:
    """Start with --gpus 0 and `flags`; `base`: the retry wait's base in seconds (else
    the real 30 s). Answers the job id."""
    config = write_config(tmp_path / f"{run_id}.yaml", step_seconds=0.05, **cfg)
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", run_id,
             "--no-follow", "--gpus", "0", *flags, timeout=180,
             env={retry_rule.BASE_ENV: base} if base else None)
    assert r.rc == 0, r.err
    assert r.out.startswith(f"started {run_id} on {LOGIN} (Slurm job ")
    return (Path(workdir) / run_id / "slurm_job_id").read_text().strip()


def test_a_failed_attempt_is_retried_in_the_same_job_and_status_says_the_attempts(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "rt"
    # Saves checkpoint-2, dies of an NCCL timeout at step 3, once; base 3 s: waits 6 s.
    job = start(scli, tmp_path, workdir, "rt", "--retries", "1", base="3",
                steps=5, save_steps=2, crash_at=3, crash="nccl_timeout", crash_once=True)
    waiting = wait_for(scli, "rt", workdir, lambda s: s["state"] == "queued"
                       and s.get("reason", "").startswith("retrying"), timeout=60)
    assert waiting["reason"] == f"retrying in 6 s after {NCCL} (attempt 2 of 2)"
    assert waiting["slurm_job_id"] == job

    done = wait_for(scli, "rt", workdir, lambda s: s["state"] == "completed", timeout=90)
    assert done["slurm_job_id"] == job and done["attempt"] == 2
    assert [(a["attempt"], a["exit"], a["checkpoint"]) for a in done["attempts"]] == [
        (1, 134, None), (2, 0, "outputs/checkpoint-2")]
    assert done["attempts"][0]["reason"] == NCCL
    log = (run / "train.log").read_text()
    before, sep, after = log.partition("=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    assert sep and "Watchdog caught collective operation timeout" in before
    assert "Continuing training from global step 2" in after and "training done, exit 0" in after
    assert "env RTRAIN_RESUME_FROM=outputs/checkpoint-2" in after
    assert (run / "attempts" / "1" / "status").read_text().strip() == "134"
    # Slurm never requeued it: its restart count stays 0 whatever our attempt number.
    assert (run / "status_attempt").read_text().strip() == "0"
    assert (run / "retry.pyz").exists() and not (run / "retry_wait").exists()


def test_what_repeating_cannot_fix_is_not_retried_and_the_reason_says_why(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "rm"
    start(scli, tmp_path, workdir, "rm", "--retries", "3", base="0", steps=5, crash_at=2,
          crash="module")
    got = wait_for(scli, "rm", workdir, lambda s: s["state"] == "failed (exit 1)", timeout=60)
    assert got["reason"] == ("missing Python module peft: pip install peft on the host "
                             "(not retried: repeating cannot fix it)")
    assert "=== attempt 2" not in (run / "train.log").read_text()


def test_a_stop_during_the_retry_wait_ends_the_job_with_no_further_attempt(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "rs"
    start(scli, tmp_path, workdir, "rs", "--retries", "2", steps=5, crash_at=2, crash="nccl_timeout")
    got = wait_for(scli, "rs", workdir, lambda s: s["state"] == "queued"
                   and s.get("reason", "").startswith("retrying"), timeout=60)
    assert got["reason"] == f"retrying in 60 s after {NCCL} (attempt 2 of 3)"
    r = scli("stop", LOGIN, "rs", "--workdir", workdir, "--grace", "5", timeout=120)
    assert r.rc == 0, r.err
    assert r.out.strip().endswith("stopped rs on cluster")
    assert status(scli, "rs", workdir)["state"] == "stopped"
    assert "=== attempt 2" not in (run / "train.log").read_text()
    records = [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]
    assert not any(r.get("attempt") == 2 for r in records)


def test_retries_are_refused_for_a_job_of_several_nodes_before_anything_is_made(
        scli: SlurmCli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    workdir = tmp_path / "work"
    r = scli("start", LOGIN, "-c", str(config), "--workdir", str(workdir), "--run-id", "r1",
             "--no-follow", "--partition", "multi", "--nodes", "2", "--retries", "1")
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: --retries works in a job of one node, not 2: leave out "
                     "--retries (and config.toml's `retries`) and use `rtrain-tui resume HOST "
                     "RUN` after a failure.\n")
    assert not workdir.exists()
