"""`start --retries N` on the real test Slurm (issue 18): the job's batch script runs the
trainer inside the box's retry loop (core/host/retry.sh), so a failed attempt is resumed
within the same job, on the GPUs it holds; the attempt count is the run's, not Slurm's
requeue count; while the loop waits the run reads `queued` with why, as on a box. The
box's stall watchdog (core/host/watch.sh) runs beside the trainer on the batch node: a
silent job reads `running` with `stalled: …`; `--on-stall stop` ends the job, `restart`
resumes it through the same retry loop."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rtrain_tui.core.logs import retry_rule
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import status, wait_for
from tests.slurm_cluster import SlurmCluster

NCCL = "NCCL timeout: ALLREDUCE collective did not finish after 600 s"


def start(scli: SlurmCli, tmp_path: Path, workdir: str, run_id: str, *flags: str,
          base: str = "", stall_check: str = "", **cfg: object) -> str:
    """Start with --gpus 0 and `flags`; `base`: the retry wait's base in seconds (else
    the real 30 s); `stall_check`: how often the watchdog looks (else every minute).
    Answers the job id."""
    config = write_config(tmp_path / f"{run_id}.yaml", step_seconds=0.05, **cfg)
    env = {retry_rule.BASE_ENV: base, retry_rule.STALL_CHECK_ENV: stall_check}
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", run_id,
             "--no-follow", "--gpus", "0", *flags, timeout=180,
             env={k: v for k, v in env.items() if v})
    assert r.rc == 0, r.err
    assert r.out.startswith(f"started {run_id} on {LOGIN} (Slurm job ")
    return (Path(workdir) / run_id / "slurm_job_id").read_text().strip()


def test_a_failed_attempt_is_retried_in_the_same_job_and_status_says_the_attempts(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "rt"
    # Saves checkpoint-2, dies of an NCCL timeout at step 3, once; base 10 s: waits 20 s.
    # The wait is a window the test must see: attempt 1 dies a second after the launch,
    # and under load `start` returns and a status poll (a new process, ssh, Slurm) takes
    # seconds each; a 6 s wait was over before the first poll (CI, load 8-13).
    job = start(scli, tmp_path, workdir, "rt", "--retries", "1", base="10",
                steps=5, save_steps=2, crash_at=3, crash="nccl_timeout", crash_once=True)
    waiting = wait_for(scli, "rt", workdir, lambda s: s["state"] == "queued"
                       and s.get("reason", "").startswith("retrying"), timeout=60)
    assert waiting["reason"] == f"retrying in 20 s after {NCCL} (attempt 2 of 2)"
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
    assert (run / ".rtrain" / "attempts" / "1" / "status").read_text().strip() == "134"
    # Slurm never requeued it: its restart count stays 0 whatever our attempt number.
    assert (run / "status_attempt").read_text().strip() == "0"
    assert (run / "retry.pyz").exists() and not list(run.glob(".rtrain/attempts/*/retry_wait"))


def test_a_job_requeued_on_its_second_attempt_goes_on_as_that_attempt(
        scli: SlurmCli, tmp_path: Path, workdir: str, slurm: SlurmCluster) -> None:
    """Slurm's requeue count is not the run's attempt count: a requeue (as preemption or
    a node failure do) runs the batch script again, and the run stays on attempt 2 with
    its retries left, never back on attempt 1."""
    run = Path(workdir) / "rq"
    job = start(scli, tmp_path, workdir, "rq", "--retries", "2", base="0",
                steps=100000, save_steps=2, crash_at=3, crash="nccl_timeout", crash_once=True)
    wait_for(scli, "rq", workdir, lambda s: s["state"] == "running" and s["attempt"] == 2, timeout=60)
    slurm.client("scontrol", "requeue", job)
    deadline = time.monotonic() + 150
    while not all(w in slurm.client("scontrol", "-o", "show", "job", job)
                  for w in ("Restarts=1", "JobState=RUNNING")):
        assert time.monotonic() < deadline, "the requeued job never ran again"
        time.sleep(0.5)
    got = wait_for(scli, "rq", workdir, lambda s: s["state"] == "running")
    assert got["slurm_job_id"] == job and got["attempt"] == 2
    assert [a["attempt"] for a in got["attempts"]] == [1, 2]
    # What the requeued batch script recorded as it started: attempt 2 launched again.
    last = json.loads((run / ".rtrain" / "attempts.jsonl").read_text().splitlines()[-1])
    # (With `ran`: the seconds its run before the requeue ran, billed by the cost rule.)
    assert set(last) - {"ran"} == {"attempt", "launched"} and last["attempt"] == 2
    assert "rt_a=$rt_attempt" in (run / "run.sbatch").read_text()
    assert scli("stop", LOGIN, "rq", "--workdir", workdir, "--grace", "2", timeout=120).rc == 0


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
    # `runs` says it too: the refresh probe reads the same wait.
    listed = {x["run_id"]: x for x in json.loads(scli("runs", "--refresh", "--json").out)}
    assert listed["rs"]["state"] == "queued"
    r = scli("stop", LOGIN, "rs", "--workdir", workdir, "--grace", "5", timeout=120)
    assert r.rc == 0, r.err
    assert r.out.strip().endswith("stopped rs on cluster")
    assert status(scli, "rs", workdir)["state"] == "stopped"
    assert "=== attempt 2" not in (run / "train.log").read_text()
    records = [json.loads(line) for line in (run / ".rtrain" / "attempts.jsonl").read_text().splitlines()]
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


# A trainer that goes silent at step 3, watched with --stall-after 3s (the log's age is
# read in whole seconds: 1 s could be 0.05 s), looked at every 0.2 s.
STALL = ("--stall-after", "3s")


def test_a_silent_job_reads_running_with_a_stall_reason(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    start(scli, tmp_path, workdir, "sw", *STALL, stall_check="0.2", steps=100, hang_at=3)
    got = wait_for(scli, "sw", workdir, lambda s: s["stalled_for"] is not None, timeout=60)
    assert got["state"] == "running" and got["stalled_for"] >= 3
    assert got["reason"] == f"stalled: no output for {got['stalled_for']}s"
    r = scli("status", LOGIN, "sw", "--workdir", workdir)
    assert r.out == "running\n" and r.err.startswith("rtrain-tui: sw on cluster: stalled: no output for ")
    assert scli("stop", LOGIN, "sw", "--workdir", workdir, "--grace", "2", timeout=120).rc == 0


def test_on_stall_stop_ends_the_job(scli: SlurmCli, tmp_path: Path, workdir: str,
                                    slurm: SlurmCluster) -> None:
    run = Path(workdir) / "ss"
    job = start(scli, tmp_path, workdir, "ss", *STALL, "--on-stall", "stop", stall_check="0.2",
                steps=100, hang_at=3)
    wait_for(scli, "ss", workdir, lambda s: s["state"] == "stopped", timeout=60)
    assert "; stopping the run (--on-stall stop)" in (run / "train.log").read_text()
    assert (run / "status").read_text().strip() == "143"
    # The job itself ended: Slurm holds nothing of it any more.
    deadline = time.monotonic() + 30
    while (state := slurm.client("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").strip()) in (
            "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state == "FAILED"  # the batch script's exit 143: the trainer's end, recorded
    # `stopped`, with the stall as its reason, as on a box (the job's own stop_requested).
    ended = status(scli, "ss", workdir)
    assert ended["state"] == "stopped" and ended["reason"].startswith("stalled: no output for "), ended


def test_on_stall_restart_resumes_the_job_from_its_checkpoint_in_the_same_job(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "sr"
    job = start(scli, tmp_path, workdir, "sr", *STALL, "--on-stall", "restart", "--retries", "1",
                base="0", stall_check="0.2", steps=6, save_steps=2, hang_at=3, hang_once=True)
    done = wait_for(scli, "sr", workdir, lambda s: s["state"] == "completed", timeout=90)
    assert done["slurm_job_id"] == job and done["attempt"] == 2
    log = (run / "train.log").read_text()
    before, sep, after = log.partition("=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    assert sep and "; restarting it (--on-stall restart)" in before
    assert "Continuing training from global step 2" in after and "training done, exit 0" in after
    first = done["attempts"][0]
    assert first["reason"].startswith("stalled: no output for ") and first["exit"] == 143


def test_on_stall_stop_is_refused_for_a_job_of_several_nodes(scli: SlurmCli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    workdir = tmp_path / "work"
    r = scli("start", LOGIN, "-c", str(config), "--workdir", str(workdir), "--run-id", "r1",
             "--no-follow", "--partition", "multi", "--nodes", "2", "--on-stall", "stop")
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: --on-stall stop works in a job of one node, not 2: leave out "
                     "--on-stall (a stall is still said) and end a stalled job with "
                     "`rtrain-tui stop`.\n")
    assert not workdir.exists()


def test_a_resume_whose_launch_json_asks_retries_of_several_nodes_is_refused(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    """launch.json is host text: retries a start would have refused (a job of several
    nodes) are refused by a resume too, with a line, before anything is submitted."""
    run = Path(workdir) / "mn"
    config = write_config(tmp_path / "mn.yaml", steps=2, exit_code=1)
    trainer = "{python} -m praisonai_train llm --config {config}"
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", "mn",
             "--no-follow", "--partition", "multi", "--nodes", "2", "--gpus", "1",
             "--trainer", trainer, timeout=180)
    assert r.rc == 0, r.err
    job = wait_for(scli, "mn", workdir, lambda s: s["state"].startswith("failed"), timeout=60)["slurm_job_id"]
    spec = json.loads((run / ".rtrain" / "launch.json").read_text())
    (run / ".rtrain" / "launch.json").write_text(json.dumps({**spec, "retries": 1}))
    r = scli("resume", LOGIN, "mn", "--workdir", workdir, timeout=180)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: mn on cluster: its launch.json is not usable (--retries works in "
                     "a job of one node, not 2: leave out --retries (and config.toml's `retries`) "
                     "and use `rtrain-tui resume HOST RUN` after a failure); start it again "
                     "instead.\n")
    assert (run / "slurm_job_id").read_text().strip() == job
    assert sorted(p.name for p in (run / ".rtrain" / "attempts").iterdir()) == ["1"]  # none claimed
