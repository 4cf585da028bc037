"""`resume` on the real test Slurm: a new job for the same run directory, from the newest
complete checkpoint, with the new job id recorded (issue 18, Resume)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import start, status, wait_for
from tests.slurm_cluster import SlurmCluster


def test_a_failed_job_resumes_as_a_new_job_in_its_run_dir(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "sr"
    # Saves checkpoint-2, then is SIGKILLed while saving checkpoint-4.
    start(scli, tmp_path, workdir, "sr", "--gpus", "0", steps=6, save_steps=2, die_mid_save=4,
          step_seconds=0.05)
    first = wait_for(scli, "sr", workdir, lambda s: s["state"] == "failed (exit 137)")["slurm_job_id"]

    r = scli("resume", LOGIN, "sr", "--workdir", workdir, timeout=180)
    assert r.rc == 0, r.err
    head = r.out.splitlines()[0]
    assert head.startswith("resumed sr on cluster: attempt 2, from outputs/checkpoint-2 (Slurm job ")
    job = head.rpartition("Slurm job ")[2].rstrip(")")
    assert job != first and "skipped outputs/checkpoint-4 incomplete" in r.err

    done = wait_for(scli, "sr", workdir, lambda s: s["state"] == "completed", timeout=90)
    assert done["slurm_job_id"] == job and done["attempt"] == 2
    assert [(a["attempt"], a["state"]) for a in done["attempts"]] == [
        (1, "failed (exit 137)"), (2, "completed")]
    assert (run / ".rtrain" / "attempts" / "1" / "slurm_job_id").read_text().strip() == first
    after = (run / "train.log").read_text().partition(
        "=== attempt 2: resuming from outputs/checkpoint-2 ===\n")[2]
    assert "Continuing training from global step 2" in after and "training done, exit 0" in after
    listed = json.loads(scli("runs", "--json").out)
    assert [(r["run_id"], r["slurm_job_id"]) for r in listed] == [("sr", job)]
    assert status(scli, "sr", workdir)["state"] == "completed"


def test_a_resume_sbatch_refuses_reads_unknown_and_the_next_resume_launches(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "sq"
    start(scli, tmp_path, workdir, "sq", "--gpus", "0", steps=3, save_steps=1, exit_code=1,
          step_seconds=0.05)
    wait_for(scli, "sq", workdir, lambda s: s["state"] == "failed (exit 1)")
    spec = json.loads((run / ".rtrain" / "launch.json").read_text())
    (run / ".rtrain" / "launch.json").write_text(json.dumps({**spec, "options": {**spec["options"],
                                                                     "partition": "nope"}}))
    r = scli("resume", LOGIN, "sq", "--workdir", workdir, timeout=180)
    assert (r.rc, r.out) == (1, "")
    assert r.err.startswith("rtrain-tui: cluster: attempt 2 of sq did not launch (")
    assert r.err.endswith("); `rtrain-tui resume cluster sq` tries again.\n")
    assert status(scli, "sq", workdir)["state"] == "unknown"

    (run / ".rtrain" / "launch.json").write_text(json.dumps(spec))
    r = scli("resume", LOGIN, "sq", "--workdir", workdir, timeout=180)
    assert r.rc == 0, r.err
    assert r.out.startswith("resumed sq on cluster: attempt 3, from outputs/checkpoint-3 (Slurm job ")
    wait_for(scli, "sq", workdir, lambda s: s["state"] == "failed (exit 1)" and s["attempt"] == 3,
             timeout=90)


def test_a_stop_still_under_way_when_a_resume_submits_never_cancels_the_new_job(
        scli: SlurmCli, tmp_path: Path, workdir: str, slurm: SlurmCluster) -> None:
    """A stop's TERM ended job 1, the run read `stopped`, and a resume submitted job 2
    before the stop's wait and `scancel`: those are for job 1, never job 2."""
    import os
    import secrets
    import subprocess

    from rtrain_tui.core.backends.slurm import scripts
    from rtrain_tui.core.host import remote_sh
    from rtrain_tui.core.runs import probes

    def on_login(script: str) -> dict[str, str]:
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "SLURM_CONF": str(slurm.conf)})
        return dict(probes.parse_key_values(out.stdout))

    run = Path(workdir) / "ss"
    start(scli, tmp_path, workdir, "ss", "--gpus", "0", steps=10000, save_steps=2, step_seconds=0.05)
    wait_for(scli, "ss", workdir, lambda s: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    nonce = secrets.token_hex(8)
    signalled = on_login(scripts.stop_signal(workdir, "ss", nonce, False))
    assert signalled["result"] == "signalled"
    job_1 = signalled["job"]
    wait_for(scli, "ss", workdir, lambda s: s["state"] == "stopped")
    r = scli("resume", LOGIN, "ss", "--workdir", workdir, timeout=180)
    assert r.rc == 0, r.err
    job_2 = wait_for(scli, "ss", workdir, lambda s: s["state"] == "running")["slurm_job_id"]
    assert job_2 != job_1

    # The stop goes on with the job it found: gone, so nothing is cancelled or marked.
    assert on_login(scripts.job_state(workdir, "ss", job_1))["state"] not in (
        "RUNNING", "PENDING", "CONFIGURING", "COMPLETING")
    assert on_login(scripts.stop_signal(workdir, "ss", nonce, True, job_1))["result"] == "not_running"
    assert on_login(remote_sh.mark_stopped(workdir, "ss", 137)) == {"marked": "0"}
    assert status(scli, "ss", workdir)["state"] == "running"
    assert scli("stop", LOGIN, "ss", "--workdir", workdir, "--grace", "2").rc == 0
