"""One attempt layout (issue 26, item 4) against the real sshd: each attempt's own files
live in its own directory under `.rtrain/` from its start (core/host/attempt.sh), so
nothing of an earlier attempt explains a later one (R07); a trainer's own files named
like our records never corrupt them; a run dir made before the layout still reads."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Cli, write_config
from tests.test_cli_runs import wait_state
from tests.test_retry_sshd import start


def test_a_resumed_attempt_the_user_stopped_is_never_explained_by_the_give_up_before_it(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """R07: attempt 1 died of an NCCL timeout twice (`--retries 1`) and gave up; resumed,
    the new attempt is stopped by the user. It reads `stopped`, and no NCCL text from the
    attempts before explains it (it did, from the give-up file resume.sh's list forgot)."""
    run = Path(workdir) / "g1"
    start(cli, tmp_path, workdir, "g1", "--retries", "1", base="0",
          steps=5, crash_at=2, crash="nccl_timeout")
    wait_state(cli, "g1", workdir, "failed (exit 134)", timeout=60)
    got = json.loads(cli("status", "gpu", "g1", "--workdir", workdir, "--json").out)
    assert got["reason"].endswith("(gave up after 2 attempts)") and "NCCL" in got["reason"]
    # The user fixes what killed it (no crash now, a long run) and runs it again.
    write_config(run / "config.yaml", step_seconds=0.05, steps=100000)
    r = cli("resume", "gpu", "g1", "--restart", "--workdir", workdir)
    assert r.rc == 0, r.err
    wait_state(cli, "g1", workdir, "running")
    r = cli("stop", "gpu", "g1", "--grace", "5", "--workdir", workdir)
    assert r.out == "stopped g1 on gpu\n", r.err
    r = cli("status", "gpu", "g1", "--workdir", workdir)
    assert (r.out, r.err) == ("stopped\n", "")
    got = json.loads(cli("status", "gpu", "g1", "--workdir", workdir, "--json").out)
    assert got["state"] == "stopped" and "NCCL" not in got["reason"], got["reason"]
    assert [(a["attempt"], a["state"]) for a in got["attempts"]] == [
        (1, "failed (exit 134)"), (2, "failed (exit 134)"), (3, "stopped")]
    assert "NCCL" not in got["attempts"][-1]["reason"]
    # The give-up is attempt 2's own, where it happened.
    assert "gave up" in (run / ".rtrain" / "attempts" / "2" / "retry_gave_up").read_text()


def test_a_trainer_writing_attempts_jsonl_and_launch_json_in_its_cwd_corrupts_no_record(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The run dir is the trainer's working directory: files of its own named
    attempts.jsonl and launch.json are its, never the run's attempts or what a resume
    launches again."""
    run = Path(workdir) / "sc"
    start(cli, tmp_path, workdir, "sc", steps=2, scribble=True, exit_code=1)
    wait_state(cli, "sc", workdir, "failed (exit 1)", timeout=60)
    assert "rm -rf" in (run / "launch.json").read_text()  # the trainer's, left alone
    got = json.loads(cli("status", "gpu", "sc", "--workdir", workdir, "--json").out)
    assert [(a["attempt"], a["state"]) for a in got["attempts"]] == [(1, "failed (exit 1)")]
    write_config(run / "config.yaml", step_seconds=0.02, steps=2)
    r = cli("resume", "gpu", "sc", "--restart", "--workdir", workdir)
    assert r.rc == 0 and r.out.startswith("resumed sc on gpu: attempt 2"), r.err
    wait_state(cli, "sc", workdir, "completed", timeout=60)
    got = json.loads(cli("status", "gpu", "sc", "--workdir", workdir, "--json").out)
    assert [(a["attempt"], a["state"]) for a in got["attempts"]] == [
        (1, "failed (exit 1)"), (2, "completed")]
    assert "the trainer's" not in json.dumps(got["attempts"])


def test_a_run_dir_from_before_the_layout_still_reads_its_state_reason_and_attempts(
        cli: Cli, workdir: str) -> None:
    """Everything at the top level, its ended attempt's files in attempts/1/ (as an older
    rtrain-tui left it): `status` reads the state, the retry loop's give-up as its reason,
    and attempts.jsonl's attempts."""
    run = Path(workdir) / "old"
    (run / "attempts" / "1").mkdir(parents=True)
    (run / "attempts" / "1" / "status").write_text("137\n")
    for name, text in (("train.token", "ab" * 16), ("train.pid", "999999"), ("status", "134"),
                       ("train.log", "step 1\n"),
                       ("retry_gave_up", "NCCL timeout: it hung (gave up after 3 attempts)"),
                       ("config.yaml", "model: tiny")):
        (run / name).write_text(text + "\n")
    (run / "attempts.jsonl").write_text(
        '{"attempt": 1, "exit": 137, "state": "failed (exit 137)", "ended": 1700000000}\n'
        '{"attempt": 2, "started": 1700000100, "checkpoint": ""}\n')
    r = cli("status", "gpu", "old", "--workdir", workdir)
    assert (r.out, r.err) == ("failed (exit 134)\n", "rtrain-tui: old on gpu: NCCL timeout: it "
                              "hung (gave up after 3 attempts)\n")
    got = json.loads(cli("status", "gpu", "old", "--workdir", workdir, "--json").out)
    assert [(a["attempt"], a["exit"], a["state"]) for a in got["attempts"]] == [
        (1, 137, "failed (exit 137)"), (2, 134, "failed (exit 134)")]
    assert got["attempt"] == 2 and not (run / ".rtrain").exists()
