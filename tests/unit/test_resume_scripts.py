"""The host side of a resume (host/resume.sh, remove_unlaunched.sh, resume_facts.sh) run
under a real /bin/sh, and the pure parts of core/resume.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rtrain_tui.core import launch, resume
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from tests.unit.test_remote_sh import sh

OLD, NEW, OTHER = "a" * 32, "b" * 32, "c" * 32


def ended_run(workdir: Path) -> Path:
    """A run dir as attempt 1 left it: failed, with its pid, identity and launch lock."""
    run = workdir / "r1"
    (run / "launch.lock").mkdir(parents=True)
    for name, text in (("train.token", OLD), ("train.pid", "4242"), ("train.ident", "1 x"),
                       ("status", "1"), ("train.log", "step 1\r 50%"),
                       ("config.yaml", "model: tiny\nresume_from_checkpoint: true\nsteps: 3")):
        (run / name).write_text(text + "\n" if name not in ("config.yaml", "train.log") else text)
    (run / f"run.sh.{NEW}").write_text("# attempt 2\n")
    return run


def claim(workdir: Path, token: str, checkpoint: str = "outputs/checkpoint-2") -> dict[str, str]:
    script = remote_sh.resume(
        str(workdir), "r1", token=token, previous_token=OLD, attempt=2, checkpoint=checkpoint,
        edit_config=True, separator=resume.separator(2, checkpoint),
        ended_record=json.dumps({"attempt": 1, "exit": 1}), launch_file="run.sh")
    return dict(probes.parse_key_values(sh(script)))


def test_a_claim_moves_attempt_1_aside_and_readies_the_dir_for_attempt_2(tmp_path: Path) -> None:
    """An older run dir (everything at its top level) gets the attempt layout: attempt
    1's top-level files go to its own directory, attempt 2's is made and is current."""
    run = ended_run(tmp_path)
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    assert sorted(p.name for p in (run / ".rtrain" / "attempts" / "1").iterdir()) == [
        "launch.lock", "status", "train.ident", "train.pid"]
    assert list((run / ".rtrain" / "attempts" / "2").iterdir()) == []
    assert (run / ".rtrain" / "attempt").read_text() == "2\n"
    assert not (run / "status").exists() and not (run / "train.pid").exists()
    assert (run / "train.token").read_text() == NEW + "\n"
    assert (run / "run.sh").read_text() == "# attempt 2\n"
    assert (run / "config.yaml").read_text() == (
        "model: tiny\nsteps: 3\nresume_from_checkpoint: 'outputs/checkpoint-2'\n")
    assert (run / "train.log").read_bytes() == (
        b"step 1\r 50%\n=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    lines = [json.loads(x) for x in (run / ".rtrain" / "attempts.jsonl").read_text().splitlines()]
    assert lines[0] == {"attempt": 1, "exit": 1}
    assert (lines[1]["attempt"], lines[1]["checkpoint"]) == (2, "outputs/checkpoint-2")
    # Sent again after a lost answer: the same claim, nothing moved twice.
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    assert (run / "train.log").read_text().count("=== attempt 2") == 1
    facts = dict(probes.parse_key_values(sh(remote_sh.resume_facts(str(tmp_path), "r1"))))
    assert (facts["attempts"], facts["token"]) == ("2", NEW)


def test_a_second_claim_of_the_same_attempt_is_busy_and_changes_nothing(tmp_path: Path) -> None:
    run = ended_run(tmp_path)
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    (run / f"run.sh.{OTHER}").write_text("# the other one\n")
    assert claim(tmp_path, OTHER, "outputs/checkpoint-1") == {"error": "busy", "taken": "2"}
    assert (run / "train.token").read_text() == NEW + "\n"
    assert (run / "run.sh").read_text() == "# attempt 2\n"
    assert not (run / f"run.sh.{OTHER}").exists()


def test_a_claim_that_read_the_run_mid_claim_is_told_the_attempt_the_other_took(
        tmp_path: Path) -> None:
    """A resume that read the run between the other's `mkdir .rtrain/attempts/2` and its token
    write counts one attempt filed and would give its own the number 3: the host says
    which attempt was taken (2), so its line does not name one that never was."""
    run = ended_run(tmp_path)
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    script = remote_sh.resume(
        str(tmp_path), "r1", token=OTHER, previous_token=OLD, attempt=3,
        checkpoint="outputs/checkpoint-2", edit_config=True,
        separator=resume.separator(3, "outputs/checkpoint-2"),
        ended_record=json.dumps({"attempt": 2, "exit": 1}), launch_file="run.sh")
    assert dict(probes.parse_key_values(sh(script))) == {"error": "busy", "taken": "2"}
    assert not (run / ".rtrain" / "attempts" / "3").exists()


def being_submitted(run: Path, start: str | None = None) -> None:
    """Attempt 1 of a Slurm run as submit.sh leaves it while sbatch runs: the launch lock,
    no code, no job id, and `submitting` naming the sbatch (here this live test process,
    by its pid and start time; `start` another start time: a pid recycled since)."""
    for name in ("status", "train.pid", "train.ident"):
        (run / name).unlink()
    pid = os.getpid()
    own_start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    (run / "submitting").write_text(f"{pid} {start or own_start}\n")


def test_a_claim_never_supersedes_an_attempt_whose_sbatch_has_not_answered(tmp_path: Path) -> None:
    """R01: the attempt reads `starting` (its job may be queued any moment); a resume
    from another laptop that read it `lost` is refused by the host, and nothing moves."""
    run = ended_run(tmp_path)
    being_submitted(run)
    assert claim(tmp_path, NEW) == {"error": "starting"}
    assert not (run / "attempts" / "1").exists() and (run / "launch.lock").is_dir()
    assert (run / "train.token").read_text() == OLD + "\n"
    assert not (run / f"run.sh.{NEW}").exists()
    # Its sbatch answered (a job id recorded): the attempt is no longer being submitted.
    (run / "slurm_job_id").write_text("17\n")
    (run / f"run.sh.{NEW}").write_text("# attempt 2\n")
    assert claim(tmp_path, NEW) == {"claimed": "2"}


def test_a_submission_marker_naming_a_recycled_pid_holds_nothing_up(tmp_path: Path) -> None:
    """The sbatch the marker names is gone and its pid was given to another process: no
    submission is under way, and the attempt can be superseded."""
    run = ended_run(tmp_path)
    being_submitted(run, start="1")
    assert claim(tmp_path, NEW) == {"claimed": "2"}


def test_a_restart_takes_the_resume_line_out_of_the_config(tmp_path: Path) -> None:
    run = ended_run(tmp_path)
    assert claim(tmp_path, NEW, checkpoint="") == {"claimed": "2"}
    assert (run / "config.yaml").read_text() == "model: tiny\nsteps: 3\n"
    assert (run / "train.log").read_text().endswith("=== attempt 2: restarting from the start ===\n")


def test_a_resume_line_whose_value_goes_on_over_more_lines_goes_whole(tmp_path: Path) -> None:
    """A config's `resume_from_checkpoint` whose value is a block scalar or goes on over
    indented lines: its lines go with it. Left behind, they would join the key before
    (here `output_dir` would read `outputs outputs/checkpoint-1`: the new attempt would
    save elsewhere) or break the YAML."""
    run = ended_run(tmp_path)
    (run / "config.yaml").write_text(
        "output_dir: outputs\nresume_from_checkpoint: >-\n  outputs/checkpoint-1\n\n"
        "  \nsteps: 3\nresume_from_checkpoint:\n    outputs/checkpoint-1\n# end\n")
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    assert (run / "config.yaml").read_text() == (
        "output_dir: outputs\nsteps: 3\n# end\nresume_from_checkpoint: 'outputs/checkpoint-2'\n")


def test_an_unlaunched_attempt_never_has_its_run_dir_removed(tmp_path: Path) -> None:
    """A resume cut off after its claim: the dir holds the attempts before; a refresh
    that tidies unlaunched starts must leave it (a fresh start's is still removed)."""
    run = ended_run(tmp_path)
    claim(tmp_path, NEW)
    (run / "run.sh").unlink()
    assert sh(remote_sh.remove_unlaunched(str(tmp_path), "r1", NEW)).strip() == "removed=kept"
    assert (run / ".rtrain" / "attempts" / "1" / "status").exists()
    fresh = tmp_path / "r2"
    fresh.mkdir()
    (fresh / "train.token").write_text(NEW + "\n")
    assert sh(remote_sh.remove_unlaunched(str(tmp_path), "r2", NEW)).strip() == "removed=1"


def test_attempts_are_merged_by_number_and_the_last_is_the_run_now() -> None:
    recorded = resume.parse_attempts(
        '{"attempt": 1, "state": "failed (exit 1)", "exit": 1, "ended": 1700000000, '
        '"started": "2026-11-30T10:00:00+00:00", "reason": "NCCL timeout"}\n'
        'not json\n{"attempt": 2, "started": 1700000100, "checkpoint": "outputs/checkpoint-2"}\n'
        '{"attempt": 2, "launched": 1700000160}\n')  # a queued attempt got its GPUs
    view = resume.attempts_view(recorded, "running", None, "")
    assert view == [
        {"attempt": 1, "started": "2026-11-30T10:00:00+00:00", "launched": None,
         "ended": "2023-11-14T22:13:20+00:00",
         "exit": 1, "state": "failed (exit 1)", "reason": "NCCL timeout", "checkpoint": None},
        {"attempt": 2, "started": "2023-11-14T22:15:00+00:00",
         "launched": "2023-11-14T22:16:00+00:00", "ended": None, "exit": None,
         "state": "running", "reason": "", "checkpoint": "outputs/checkpoint-2"}]
    assert resume.attempts_view([], "completed", 0, "")[0]["attempt"] == 1


def test_a_launch_json_the_host_garbled_is_refused_as_launch_json_not_as_flags_never_typed() -> None:
    """A value a validator refuses (GPU ids, env, python) is named as launch.json's, not
    as a `--gpu-ids` or `--env` the user never gave to `resume`."""
    import pytest

    from rtrain_tui.core.errors import RemoteError

    good = json.loads(launch.launch_json("{python} -m praisonai_train llm {dataset} --config {config}",
                                         "python3", "d.jsonl", 1, {}, (), False, None))
    for bad in ({"gpu_ids": [-1]}, {"env": {"A B": "1"}}, {"python": "py thon"},
                {"dataset": "../x"}):
        with pytest.raises(RemoteError) as refused:
            resume._spec({"spec": json.dumps({**good, **bad})}, "gpu", "r1")
        assert str(refused.value).startswith("r1 on gpu: its launch.json is not usable ("), bad


def test_an_attempt_number_the_host_inflated_builds_no_list_that_long() -> None:
    """R09: one attempts.jsonl line claiming attempt 2,000,000 (or a bool, or 0) is no
    attempt: `status --json` lists the attempts there are, not two million rows."""
    recorded = resume.parse_attempts(
        '{"attempt": 1, "exit": 1, "state": "failed (exit 1)"}\n'
        '{"attempt": 2000000, "started": 1700000000}\n'
        '{"attempt": true, "started": 1700000000}\n{"attempt": 0}\n{"attempt": -3}\n'
        '{"attempt": 2, "started": 1700000100}\n')
    assert [a["attempt"] for a in recorded] == [1, 2]
    view = resume.attempts_view(recorded, "running", None, "")
    assert [a["attempt"] for a in view] == [1, 2]
    assert view[-1]["state"] == "running"


def test_attempt_sh_finds_the_current_attempt_in_either_layout_and_bounds_its_number(
        tmp_path: Path) -> None:
    """attempt.sh, the one shell place that knows the layout: `.rtrain/attempt` names the
    current attempt (a garbled or huge number is attempt 1, never a path out of bounds);
    an older run dir's attempt is one more than its attempts/N/."""
    ask = 'attempt_no "$1"; printf "%s|%s|%s\\n" "$an" "$ad" "$aj"'
    new, old = tmp_path / "new", tmp_path / "old"
    (old / "attempts" / "1").mkdir(parents=True)
    (old / "attempts" / "2").mkdir()
    sh(remote_sh.ATTEMPT + f'mkdir -p "$1" && attempt_begin "$1" 3 && {ask}\n'.replace(
        '"$1"', f"'{new}'"))
    assert (new / ".rtrain" / "attempt").read_text() == "3\n"
    assert (new / ".rtrain" / "attempts" / "3").is_dir()
    said = sh(remote_sh.ATTEMPT + ask.replace('"$1"', f"'{new}'"))
    assert said == f"3|{new}/.rtrain/attempts/3|{new}/.rtrain/attempts.jsonl\n"
    assert sh(remote_sh.ATTEMPT + ask.replace('"$1"', f"'{old}'")) == f"3|{old}|{old}/attempts.jsonl\n"
    for garbled in ("2000000", "1001", "0", "-1", "../../x", "07", ""):
        (new / ".rtrain" / "attempt").write_text(garbled + "\n")
        assert sh(remote_sh.ATTEMPT + ask.replace('"$1"', f"'{new}'")).startswith("1|"), garbled


def test_a_claim_in_the_new_layout_leaves_the_attempt_befores_own_files_in_its_directory(
        tmp_path: Path) -> None:
    """Attempt 1 gave up (its retry_gave_up in its own directory): the claim of attempt 2
    makes attempt 2's directory, empty, the current one; what attempt 1 wrote of its own
    stays where it was, and only the top-level files the contract keeps are filed there."""
    run = ended_run(tmp_path)
    one = run / ".rtrain" / "attempts" / "1"
    one.mkdir(parents=True)
    (run / ".rtrain" / "attempt").write_text("1\n")
    (one / "retry_gave_up").write_text("NCCL timeout (gave up after 2 attempts)\n")
    (run / "trainer_notes.txt").write_text("the trainer's\n")
    assert claim(tmp_path, NEW) == {"claimed": "2"}
    assert sorted(p.name for p in one.iterdir()) == [
        "launch.lock", "retry_gave_up", "status", "train.ident", "train.pid"]
    assert list((run / ".rtrain" / "attempts" / "2").iterdir()) == []
    assert (run / ".rtrain" / "attempt").read_text() == "2\n"
    assert (run / "trainer_notes.txt").exists()
    facts = dict(probes.parse_key_values(sh(remote_sh.resume_facts(str(tmp_path), "r1"))))
    assert facts["attempts"] == "2"


def test_an_older_run_dir_resumed_before_keeps_its_count_of_attempts_in_the_layout(
        tmp_path: Path) -> None:
    """An older run dir with attempts/1/ is on attempt 2: the claim of attempt 3 gives it
    the layout with attempt 2 current first, files attempt 2's top-level files in
    .rtrain/attempts/2/ and leaves attempts/1/ as it was."""
    run = ended_run(tmp_path)
    (run / "attempts" / "1").mkdir(parents=True)
    (run / "attempts" / "1" / "status").write_text("137\n")
    (run / "launch.json").write_text('{"trainer": "x"}\n')
    script = remote_sh.resume(
        str(tmp_path), "r1", token=NEW, previous_token=OLD, attempt=3, checkpoint="",
        edit_config=False, separator=resume.separator(3, ""),
        ended_record=json.dumps({"attempt": 2, "exit": 1}), launch_file="run.sh")
    assert dict(probes.parse_key_values(sh(script))) == {"claimed": "3"}
    assert (run / ".rtrain" / "attempts" / "2" / "status").read_text() == "1\n"
    assert (run / "attempts" / "1" / "status").read_text() == "137\n"
    assert (run / ".rtrain" / "launch.json").exists() and not (run / "launch.json").exists()
    assert (run / ".rtrain" / "attempt").read_text() == "3\n"
    facts = dict(probes.parse_key_values(sh(remote_sh.resume_facts(str(tmp_path), "r1"))))
    assert (facts["attempts"], facts["spec"]) == ("3", '{"trainer": "x"}')
