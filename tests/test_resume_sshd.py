"""`rtrain-tui resume` against the real sshd: a new attempt of an ended run in its own
directory, from its newest complete checkpoint (issue 18, Resume)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Cli, write_config
from tests.sshd import SshHosts
from tests.test_cli_runs import wait_state


def start(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str, **cfg: object) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", step_seconds=0.02, **cfg)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", *(extra or ("--gpus", "0")))
    assert r.rc == 0, r.err


def wait_for(what: str, predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def marked(token: str) -> list[int]:
    """Live processes that carry the run marker RTRAIN_RUN=<token> (this test's only)."""
    want = f"RTRAIN_RUN={token}".encode()
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if want in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except OSError:
            pass
    return pids


def attempt_dirs(run: Path) -> list[str]:
    """The run's attempts that have their own directory (core/host/attempt.sh): each one
    claimed, from its start."""
    return sorted(os.listdir(run / ".rtrain" / "attempts"))


def test_resume_takes_the_newest_complete_checkpoint_past_one_cut_off_mid_save(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "r1"
    # Saves checkpoint-2, is SIGKILLed while saving checkpoint-4 (no trainer_state.json).
    start(cli, tmp_path, workdir, "r1", steps=6, save_steps=2, die_mid_save=4)
    wait_state(cli, "r1", workdir, "failed (exit 137)")
    first_token = (run / "train.token").read_text().strip()

    r = cli("resume", "gpu", "r1", "--workdir", workdir)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == "resumed r1 on gpu: attempt 2, from outputs/checkpoint-2"
    assert ("rtrain-tui: skipped outputs/checkpoint-4 incomplete: no trainer_state.json: "
            "cut off mid-save\n") in r.err
    wait_state(cli, "r1", workdir, "completed")

    log = (run / "train.log").read_text()
    before, sep, after = log.partition("=== attempt 2: resuming from outputs/checkpoint-2 ===\n")
    assert sep and "killed while saving outputs/checkpoint-4" in before
    assert "env RTRAIN_RESUME_FROM=outputs/checkpoint-2" in after
    assert "Continuing training from global step 2" in after
    assert "'step': 3" in after and "'step': 2," not in after and "training done, exit 0" in after
    assert "resume_from_checkpoint: 'outputs/checkpoint-2'\n" in (run / "config.yaml").read_text()
    # Attempt 1's end is kept apart, and attempt 2 has a marker of its own.
    assert (run / ".rtrain" / "attempts" / "1" / "status").read_text().strip() == "137"
    assert (run / "train.token").read_text().strip() != first_token
    assert (run / "outputs" / "checkpoint-4" / "trainer_state.json").exists()  # saved whole now

    s = cli("status", "gpu", "r1", "--workdir", workdir, "--json")
    got = json.loads(s.out)
    assert got["state"] == "completed" and got["attempt"] == 2
    one, two = got["attempts"]
    assert (one["attempt"], one["state"], one["exit"], one["checkpoint"]) == (1, "failed (exit 137)", 137, None)
    assert (two["attempt"], two["state"], two["exit"], two["checkpoint"]) == (
        2, "completed", 0, "outputs/checkpoint-2")
    assert one["ended"] and two["started"] and one["started"]
    assert cli("status", "gpu", "r1", "--workdir", workdir).out == "completed\n"


def test_resume_without_a_complete_checkpoint_refuses_and_restart_runs_it_again(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "r2"
    start(cli, tmp_path, workdir, "r2", steps=3, exit_code=1)
    wait_state(cli, "r2", workdir, "failed (exit 1)")

    r = cli("resume", "gpu", "r2", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: r2 on gpu has no complete checkpoint to resume from; "
                     "`rtrain-tui resume gpu r2 --restart` runs it again from the start.\n")
    assert attempt_dirs(run) == ["1"]  # nothing claimed

    r = cli("resume", "gpu", "r2", "--restart", "--workdir", workdir)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == "resumed r2 on gpu: attempt 2, from the start"
    wait_state(cli, "r2", workdir, "failed (exit 1)")
    log = (run / "train.log").read_text()
    assert log.count("'step': 1,") == 2
    assert "=== attempt 2: restarting from the start ===\n{'loss'" not in log  # argv line first
    assert "=== attempt 2: restarting from the start ===\nargv=" in log
    assert "resume_from_checkpoint" not in (run / "config.yaml").read_text()
    got = json.loads(cli("status", "gpu", "r2", "--workdir", workdir, "--json").out)
    assert [(a["attempt"], a["exit"], a["checkpoint"]) for a in got["attempts"]] == [
        (1, 1, None), (2, 1, None)]


def test_resume_from_a_checkpoint_chosen_by_hand_and_what_from_refuses(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "r3"
    start(cli, tmp_path, workdir, "r3", steps=4, save_steps=1, exit_code=1)
    wait_state(cli, "r3", workdir, "failed (exit 1)")
    (run / "outputs" / "checkpoint-3" / "trainer_state.json").unlink()

    for path, said in (
        ("outputs/checkpoint-9", "--from outputs/checkpoint-9: r3 on gpu has no such checkpoint-N "
                                 "directory (it has: outputs/checkpoint-4, outputs/checkpoint-3, "
                                 "outputs/checkpoint-2, outputs/checkpoint-1)."),
        ("outputs/checkpoint-3", "--from outputs/checkpoint-3: outputs/checkpoint-3 is incomplete "
                                 "(no trainer_state.json: cut off mid-save); the newest complete "
                                 "one is outputs/checkpoint-4; the trainer would fail on it."),
        ("../r1/outputs/checkpoint-2", "'../r1/outputs/checkpoint-2' points outside the run directory."),
        ("train.log", "--from 'train.log' is not a checkpoint-N directory of the run"),
    ):
        r = cli("resume", "gpu", "r3", "--from", path, "--workdir", workdir)
        assert r.rc != 0 and said in r.err, (path, r.err)
    assert attempt_dirs(run) == ["1"]  # nothing claimed

    r = cli("resume", "gpu", "r3", "--from", "outputs/checkpoint-2", "--workdir", workdir)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == "resumed r3 on gpu: attempt 2, from outputs/checkpoint-2"
    wait_state(cli, "r3", workdir, "failed (exit 1)")
    after = (run / "train.log").read_text().partition("=== attempt 2: resuming from outputs/checkpoint-2 ===")[2]
    assert "Continuing training from global step 2" in after and "'step': 3" in after


def test_resume_refuses_a_running_and_a_completed_run_saying_why(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    start(cli, tmp_path, workdir, "live", steps=10000)
    start(cli, tmp_path, workdir, "done", steps=2)
    wait_state(cli, "done", workdir, "completed")
    wait_state(cli, "live", workdir, "running")

    r = cli("resume", "gpu", "live", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: live is running on gpu: only a run that ended failed, stopped "
                     "or lost can be resumed; stop it first (`rtrain-tui stop gpu live`).\n")
    r = cli("resume", "gpu", "done", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: done completed on gpu: there is nothing to resume; start a "
                     "new run to train again.\n")
    r = cli("resume", "gpu", "nope", "--workdir", workdir)
    assert r.rc == 1 and "no run nope on gpu" in r.err
    assert attempt_dirs(Path(workdir) / "live") == ["1"]
    assert cli("stop", "gpu", "live", "--grace", "5", "--workdir", workdir).rc == 0


def test_two_resumes_at_once_start_one_attempt_which_refresh_sees_and_stop_ends(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "r4"
    # One GPU (the stand-in host has one free): the resume chooses it again.
    start(cli, tmp_path, workdir, "r4", "--gpus", "1", steps=10000, save_steps=2, children=1)
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    r = cli("stop", "gpu", "r4", "--grace", "5", "--workdir", workdir)
    assert r.out == "stopped r4 on gpu\n", r.err
    old_pid = int((run / "train.pid").read_text())

    both = [cli.popen("resume", "gpu", "r4", "--workdir", workdir) for _ in range(2)]
    results = [(p.wait(timeout=60), *p.communicate()) for p in both]
    won = [out for rc, out, _ in results if rc == 0]
    lost = [err for rc, _, err in results if rc != 0]
    assert len(won) == 1 and won[0].startswith("resumed r4 on gpu: attempt 2, from outputs/checkpoint-")
    wait_for("attempt 2's GPU", lambda: "env CUDA_VISIBLE_DEVICES=0 " in (
        run / "train.log").read_text().partition("=== attempt 2")[2])
    assert lost == ["rtrain-tui: r4 is running on gpu: only a run that ended failed, stopped or "
                    "lost can be resumed; stop it first (`rtrain-tui stop gpu r4`).\n"]
    assert attempt_dirs(run) == ["1", "2"]
    assert (run / "train.log").read_text().count("=== attempt 2:") == 1
    # The resumes' lock (one file per run, here) is gone once both are done.
    assert list((cli.index.parent / "starting").glob("resume-*.lock")) == []

    # The index left the final state: a refresh probes the run again and sees attempt 2.
    listed = json.loads(cli("runs", "--refresh", "--json").out)
    assert [(r["run_id"], r["state"]) for r in listed if r["run_id"] == "r4"] == [("r4", "running")]
    token = (run / "train.token").read_text().strip()
    new_pid = int((run / "train.pid").read_text())
    assert new_pid != old_pid and (run / ".rtrain" / "attempts" / "1" / "train.pid").read_text().strip() == str(old_pid)
    assert len(marked(token)) >= 3  # wrapper, trainer, its child

    r = cli("stop", "gpu", "r4", "--grace", "5", "--workdir", workdir)
    assert r.out == "stopped r4 on gpu\n", r.err
    assert marked(token) == []
    assert cli("status", "gpu", "r4", "--workdir", workdir).out == "stopped\n"


def test_a_trainer_template_gets_its_resume_flag_and_the_env_and_its_config_is_left_alone(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    run = Path(workdir) / "t1"
    template = ("echo resume=[{resume:--from}] env=[${RTRAIN_RESUME_FROM:-none}] && "
                "{python} -m praisonai_train llm --config {config}")
    start(cli, tmp_path, workdir, "t1", "--gpus", "0", "--trainer", template,
          steps=4, save_steps=2, exit_code=1)
    wait_state(cli, "t1", workdir, "failed (exit 1)")
    r = cli("resume", "gpu", "t1", "--workdir", workdir)
    assert r.out.splitlines()[0] == "resumed t1 on gpu: attempt 2, from outputs/checkpoint-4", r.err
    wait_state(cli, "t1", workdir, "failed (exit 1)")
    before, sep, after = (run / "train.log").read_text().partition(
        "=== attempt 2: resuming from outputs/checkpoint-4 ===\n")
    assert sep and "resume=[] env=[none]\n" in before
    assert after.startswith("resume=[--from outputs/checkpoint-4] env=[outputs/checkpoint-4]\n")
    # A template of the user's own is told by its flag and the env; its config is theirs.
    assert "resume_from_checkpoint" not in (run / "config.yaml").read_text()


def test_an_attempt_claimed_but_never_launched_reads_unknown_and_resume_takes_the_next(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """A resume cut off between its claim and its launch (the client killed): a refresh
    keeps the run and its attempts (never removes them as an unlaunched start's), leaves
    `starting`, and the next resume claims attempt 3."""
    import subprocess
    from dataclasses import replace

    from rtrain_tui.core import RunIndex
    from rtrain_tui.core.host import remote_sh

    run = Path(workdir) / "r5"
    start(cli, tmp_path, workdir, "r5", steps=4, save_steps=2, exit_code=1)
    wait_state(cli, "r5", workdir, "failed (exit 1)")
    new = "d" * 32
    (run / f"run.sh.{new}").write_text("exit 3\n")
    claim = remote_sh.resume(
        workdir, "r5", token=new, previous_token=(run / "train.token").read_text().strip(),
        attempt=2, checkpoint="outputs/checkpoint-4", edit_config=True,
        separator="=== attempt 2: resuming from outputs/checkpoint-4 ===",
        ended_record='{"attempt": 1}', launch_file="run.sh")
    assert subprocess.run(["/bin/sh", "-c", claim], capture_output=True, text=True).stdout == "claimed=2\n"
    index = RunIndex(cli.index)
    index.update(lambda runs: [replace(r, state="starting", token=new, ended_at="") for r in runs])

    listed = json.loads(cli("runs", "--refresh", "--json").out)
    assert [r["state"] for r in listed] == ["unknown"]
    assert (run / ".rtrain" / "attempts" / "1" / "status").exists()

    r = cli("resume", "gpu", "r5", "--workdir", workdir)
    assert r.out.splitlines()[0] == "resumed r5 on gpu: attempt 3, from outputs/checkpoint-4", r.err
    wait_state(cli, "r5", workdir, "failed (exit 1)")
    assert attempt_dirs(run) == ["1", "2", "3"]
    after = (run / "train.log").read_text().partition("=== attempt 3: resuming from outputs/checkpoint-4 ===\n")[2]
    assert "Continuing training from global step 4" in after


def test_a_lost_run_resumes_and_one_without_launch_json_is_refused_saying_why(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    import signal

    run = Path(workdir) / "gone"
    start(cli, tmp_path, workdir, "gone", steps=10000, save_steps=2)
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    # As the OOM killer or a reboot leaves it: every process of the run gone, nothing recorded.
    for pid in marked((run / "train.token").read_text().strip()):
        os.kill(pid, signal.SIGKILL)
    wait_state(cli, "gone", workdir, "lost")
    r = cli("resume", "gpu", "gone", "--workdir", workdir)
    assert r.rc == 0 and r.out.startswith("resumed gone on gpu: attempt 2, from outputs/checkpoint-"), r.err
    wait_state(cli, "gone", workdir, "running")
    assert cli("stop", "gpu", "gone", "--grace", "5", "--workdir", workdir).out == "stopped gone on gpu\n"

    # Started by `praisonai train remote` (or an older rtrain-tui): what to launch is unknown.
    other = Path(workdir) / "theirs"
    other.mkdir()
    for name, text in (("train.pid", "999999"), ("status", "1"), ("train.log", "boom\n")):
        (other / name).write_text(text + "\n")
    r = cli("resume", "gpu", "theirs", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: theirs on gpu has no usable launch.json (it was started by an "
                     "older rtrain-tui or by `praisonai train remote`), so what to launch again "
                     "is not known; start it again instead.\n")


def test_two_laptops_resuming_at_once_start_one_attempt_and_both_indexes_see_it(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Two clients with indexes of their own: the host's claim (one mkdir) decides. The
    other is told why (the run is running, or another resume took the attempt), and its
    index is left so that a refresh reads attempt 2."""
    run = stopped_after_a_checkpoint(cli, tmp_path, workdir, "r6")
    # The other laptop's index knows the run too (a copy of this one's files).
    laptop = Cli(cli.hosts, laptop_index(cli, tmp_path))
    assert [r["run_id"] for r in json.loads(laptop("runs", "--json").out)] == ["r6"]

    both = [c.popen("resume", "gpu", "r6", "--workdir", workdir) for c in (cli, laptop)]
    results = [(p.wait(timeout=60), *p.communicate()) for p in both]
    assert sorted(rc for rc, _, _ in results) == [0, 1], results
    err = next(e for rc, _, e in results if rc == 1)
    assert err in ("rtrain-tui: r6 is running on gpu: only a run that ended failed, stopped or "
                   "lost can be resumed; stop it first (`rtrain-tui stop gpu r6`).\n",
                   "rtrain-tui: another resume of r6 on gpu took attempt 2 first; "
                   "`rtrain-tui status gpu r6` tells how it is going.\n"), err
    assert attempt_dirs(run) == ["1", "2"]
    assert (run / "train.log").read_text().count("=== attempt 2:") == 1
    for c in (cli, laptop):
        listed = json.loads(c("runs", "--refresh", "--json").out)
        assert [r["state"] for r in listed if r["run_id"] == "r6"] == ["running"]
    assert cli("stop", "gpu", "r6", "--grace", "5", "--workdir", workdir).rc == 0


def test_a_resume_that_read_the_run_ended_before_another_resumed_it_takes_nothing(
        cli: Cli, tmp_path: Path, workdir: str, hosts: SshHosts,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race of two laptops, its window held open: this laptop's resume read the run
    `stopped`, then the other laptop's resume claimed attempt 2 and launched it, and only
    then did this one read the run directory's facts (2 attempts, attempt 2's token). It
    must not take attempt 2's token for the ended attempt's: that claimed attempt 3 over
    a live attempt 2 (two trainers at once, attempt 2's pid and status filed away) and
    said `resumed` for it."""
    from rtrain_tui.core import resume as resume_mod

    run = stopped_after_a_checkpoint(cli, tmp_path, workdir, "r6b")
    laptop = laptop_index(cli, tmp_path)
    real_facts = resume_mod._facts
    other: list[tuple[int, str, str]] = []

    async def facts_after_the_other_resumed(*args: object) -> dict[str, str]:
        if not other:  # the other laptop resumes the run, all of it, in this window
            r = await asyncio.to_thread(cli, "resume", "gpu", "r6b", "--workdir", workdir)
            other.append((r.rc, r.out, r.err))
        return await real_facts(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(resume_mod, "_facts", facts_after_the_other_resumed)

    said = asyncio.run(resume_here(hosts, laptop, workdir, "r6b"))
    assert other and other[0][0] == 0, other
    assert other[0][1].startswith("resumed r6b on gpu: attempt 2, from outputs/checkpoint-")
    assert said in ("r6b is running on gpu: only a run that ended failed, stopped or lost can "
                    "be resumed; stop it first (`rtrain-tui stop gpu r6b`).",
                    "another resume of r6b on gpu took attempt 2 first; "
                    "`rtrain-tui status gpu r6b` tells how it is going."), said
    assert attempt_dirs(run) == ["1", "2"]
    assert (run / "train.log").read_text().count("=== attempt ") == 1
    assert cli("status", "gpu", "r6b", "--workdir", workdir).out == "running\n"
    assert cli("stop", "gpu", "r6b", "--grace", "5", "--workdir", workdir).rc == 0


def test_a_resume_that_finds_the_run_claimed_by_another_before_its_launch_says_so(
        cli: Cli, tmp_path: Path, workdir: str, hosts: SshHosts,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The other laptop's resume claimed attempt 2 (its one mkdir) and has not launched
    it yet when this one asks how the run is: `unknown`. That is the other resume under
    way: this one takes nothing (it claimed attempt 3 over it), and says another resume
    took attempt 2, not that the run never launched and is to be started again."""
    import secrets

    from rtrain_tui.core.engine import Engine as EngineClass
    from rtrain_tui.core.host import remote_sh

    run = stopped_after_a_checkpoint(cli, tmp_path, workdir, "r6c")
    ended_token = (run / "train.token").read_text().strip()
    theirs = secrets.token_hex(16)
    real_probe_many = EngineClass.probe_many
    claimed: list[str] = []

    async def probe_after_their_claim(self: EngineClass, host: str, *args: object, **kw: object):  # type: ignore[no-untyped-def]
        if not claimed:  # the other laptop's resume.sh, its launch not yet sent
            shutil.copy(run / "run.sh", run / f"run.sh.{theirs}")
            claimed.append(await self.host(host).run(remote_sh.resume(
                workdir, "r6c", token=theirs, previous_token=ended_token, attempt=2,
                checkpoint="", edit_config=False, separator="=== attempt 2: theirs ===",
                ended_record="{}", launch_file="run.sh")))
        return await real_probe_many(self, host, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(EngineClass, "probe_many", probe_after_their_claim)

    said = asyncio.run(resume_here(hosts, cli.index, workdir, "r6c"))
    assert claimed == ["claimed=2\n"], claimed
    assert said == ("another resume of r6c on gpu took attempt 2 first; "
                    "`rtrain-tui status gpu r6c` tells how it is going."), said
    assert attempt_dirs(run) == ["1", "2"]
    assert (run / "train.token").read_text().strip() == theirs
    assert (run / "train.log").read_text().count("=== attempt ") == 1
    # Its index keeps no longer attempt 1's end (`stopped`, settled: never probed again by
    # the app's refresh), but what the host said, which a refresh reads again.
    for listed in (cli("runs", "--json"), cli("runs", "--refresh", "--json")):
        assert [r["state"] for r in json.loads(listed.out) if r["run_id"] == "r6c"] == ["unknown"]


def test_a_resume_never_claims_over_an_attempt_launched_since_it_read_the_run(
        cli: Cli, tmp_path: Path, workdir: str, hosts: SshHosts,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrowest window of two laptops: the other's resume claimed attempt 2 before
    this one read the run's facts (so it holds attempt 2's token), had not launched it
    when this one asked the run's state (`unknown`: claimed, never launched, which may be
    resumed), and launched it before this one's claim. The host's claim refuses to
    supersede an attempt whose processes live (it is running): one trainer, never two."""
    import secrets

    from rtrain_tui.core import resume as resume_mod
    from rtrain_tui.core.backends.direct import scripts as direct_scripts
    from rtrain_tui.core.engine import Engine as EngineClass
    from rtrain_tui.core.host import remote_sh

    run = stopped_after_a_checkpoint(cli, tmp_path, workdir, "r6d")
    ended_token = (run / "train.token").read_text().strip()
    theirs = secrets.token_hex(16)
    real_facts, real_checkpoints = resume_mod._facts, EngineClass.checkpoints
    said_there: list[str] = []

    async def facts_after_their_claim(engine: EngineClass, host: str, *args: str) -> dict[str, str]:
        if not said_there:
            shutil.copy(run / "run.sh", run / f"run.sh.{theirs}")
            said_there.append(await engine.host(host).run(remote_sh.resume(
                workdir, "r6d", token=theirs, previous_token=ended_token, attempt=2,
                checkpoint="", edit_config=False, separator="=== attempt 2: theirs ===",
                ended_record="{}", launch_file="run.sh")))
        return await real_facts(engine, host, *args)

    async def checkpoints_after_their_launch(self: EngineClass, host: str, *args: object, **kw: object):  # type: ignore[no-untyped-def]
        if len(said_there) == 1:  # after this resume's probe, before its claim
            said_there.append(await self.host(host).run(direct_scripts.launch(str(run), theirs)))
        return await real_checkpoints(self, host, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(resume_mod, "_facts", facts_after_their_claim)
    monkeypatch.setattr(EngineClass, "checkpoints", checkpoints_after_their_launch)

    try:
        said = asyncio.run(resume_here(hosts, cli.index, workdir, "r6d"))
    finally:  # a claim over it leaves attempt 2's processes unknown to the run dir
        for pid in marked(theirs) if (run / "train.token").read_text().strip() != theirs else ():
            os.kill(pid, signal.SIGKILL)
    assert said_there[0] == "claimed=2\n" and said_there[1].startswith("pid="), said_there
    assert said == ("r6d is running on gpu: only a run that ended failed, stopped or lost "
                    "can be resumed; stop it first (`rtrain-tui stop gpu r6d`)."), said
    assert attempt_dirs(run) == ["1", "2"]
    assert (run / "train.token").read_text().strip() == theirs
    assert cli("status", "gpu", "r6d", "--workdir", workdir).out == "running\n"
    assert cli("stop", "gpu", "r6d", "--grace", "5", "--workdir", workdir).rc == 0


def test_a_run_whose_start_is_under_way_is_refused(cli: Cli, tmp_path: Path, workdir: str) -> None:
    """`starting` in the index with its start's lock held (a start or resume of it in
    progress in another process): resume says so and waits for nothing."""
    import fcntl
    from dataclasses import replace

    from rtrain_tui.core import RunIndex

    start(cli, tmp_path, workdir, "r7", steps=2, exit_code=1)
    wait_state(cli, "r7", workdir, "failed (exit 1)")
    token = "e" * 32
    RunIndex(cli.index).update(lambda runs: [replace(r, state="starting", token=token) for r in runs])
    lock = cli.index.parent / "starting" / f"{token}.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = cli("resume", "gpu", "r7", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: r7 is starting on gpu: a start or resume of it is under way; "
                     "wait for it (`rtrain-tui status gpu r7` tells how it is going).\n")
    assert attempt_dirs(Path(workdir) / "r7") == ["1"]


def test_a_laptop_that_knew_the_run_ended_reads_the_resumed_attempts_own_end(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Resumed from another laptop: this one's index had attempt 1's end time. Once it
    reads the run live again (`status`), that end time goes, so when attempt 2 ends its
    own end is recorded (an end time once recorded is never moved) and elapsed is not
    attempt 1's."""
    run = Path(workdir) / "r9"
    start(cli, tmp_path, workdir, "r9", steps=10000, save_steps=2)
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    assert cli("stop", "gpu", "r9", "--grace", "5", "--workdir", workdir).rc == 0

    def ended(c: Cli, *refresh: str) -> tuple[str, str]:
        row = next(r for r in json.loads(c("runs", *refresh, "--json").out) if r["run_id"] == "r9")
        return row["state"], row["ended_at"]

    state, first_end = ended(cli, "--refresh")
    assert state == "stopped" and first_end
    (tmp_path / "laptop").mkdir()
    for path in cli.index.parent.glob("runs*.toml"):
        shutil.copy(path, tmp_path / "laptop" / path.name)
    laptop = Cli(cli.hosts, tmp_path / "laptop" / "runs.toml")

    # The end times are the host's whole seconds: attempt 2's must differ from attempt 1's.
    attempt_1_end = int((run / "status").stat().st_mtime)
    wait_for("the next second", lambda: time.time() >= attempt_1_end + 1)
    assert cli("resume", "gpu", "r9", "--workdir", workdir).rc == 0
    assert laptop("status", "gpu", "r9", "--workdir", workdir).out == "running\n"
    assert ended(laptop) == ("running", "")
    assert cli("stop", "gpu", "r9", "--grace", "5", "--workdir", workdir).rc == 0
    state, second_end = ended(cli, "--refresh")
    assert state == "stopped" and second_end > first_end
    assert ended(laptop, "--refresh") == ("stopped", second_end)


def test_a_resume_cut_off_before_its_claim_reached_the_host_leaves_the_run_as_it_was(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Ctrl-C (or a dropped connection) after the index said `starting` for attempt 2 and
    before the host claimed it: the host still has attempt 1 alone. A refresh reads the
    run as attempt 1 left it, and says attempt 1 (not a failed attempt 2 that never was)."""
    from dataclasses import replace

    from rtrain_tui.core import RunIndex

    start(cli, tmp_path, workdir, "r10", steps=4, save_steps=2, exit_code=1)
    wait_state(cli, "r10", workdir, "failed (exit 1)")
    index = RunIndex(cli.index)
    index.update(lambda runs: [replace(r, state="starting", token="f" * 32, ended_at="", attempt=2)
                               for r in runs])
    listed = json.loads(cli("runs", "--refresh", "--json").out)
    assert [r["state"] for r in listed] == ["failed (exit 1)"]
    assert [(r.run_id, r.attempt) for r in RunIndex(cli.index).load()] == [("r10", 1)]
    r = cli("resume", "gpu", "r10", "--workdir", workdir)
    assert r.out.splitlines()[0] == "resumed r10 on gpu: attempt 2, from outputs/checkpoint-4", r.err


def test_a_stop_still_under_way_when_a_resume_launches_neither_kills_nor_marks_the_new_attempt(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """A stop's ladder outlived by a resume (from another window or laptop): its SIGTERM
    ended attempt 1, the run read `stopped`, and attempt 2 launched before the ladder's
    SIGKILL and its mark. Those were meant for attempt 1: attempt 2 is neither killed
    nor marked stopped (it would read `stopped` while it trains, and a second resume
    would start a second trainer in its directory)."""
    import secrets
    import subprocess

    from rtrain_tui.core.backends.direct import scripts
    from rtrain_tui.core.host import remote_sh
    from rtrain_tui.core.runs import probes

    def on_host(script: str) -> dict[str, str]:
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
        return dict(probes.parse_key_values(out.stdout))

    run = Path(workdir) / "r11"
    start(cli, tmp_path, workdir, "r11", steps=10000, save_steps=2)
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    nonce = secrets.token_hex(8)
    signalled = on_host(scripts.stop_signal(workdir, "r11", nonce, "TERM"))
    assert signalled["result"] == "signalled"
    wait_state(cli, "r11", workdir, "stopped")
    assert cli("resume", "gpu", "r11", "--workdir", workdir).rc == 0
    wait_state(cli, "r11", workdir, "running")
    token = (run / "train.token").read_text().strip()
    alive = marked(token)

    # The ladder goes on with what it knows: attempt 1, as its SIGTERM found it.
    attempt_1 = signalled.get("run", "")
    assert on_host(scripts.run_alive_count(workdir, "r11", attempt_1)) == {"alive": "0"}
    assert on_host(scripts.stop_signal(workdir, "r11", nonce, "KILL", attempt_1))["result"] == "not_running"
    assert on_host(remote_sh.mark_stopped(workdir, "r11", 137)) == {"marked": "0"}
    assert marked(token) == alive and alive
    assert cli("status", "gpu", "r11", "--workdir", workdir).out == "running\n"
    assert cli("stop", "gpu", "r11", "--grace", "5", "--workdir", workdir).out == "stopped r11 on gpu\n"


def test_a_run_whose_token_the_host_garbled_is_refused_in_one_line(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """train.token is host text: one that is not a token of ours (a disk error, a hand
    edit) is refused saying so, not as a bug, and nothing is written in the run dir."""
    run = Path(workdir) / "r12"
    start(cli, tmp_path, workdir, "r12", steps=4, save_steps=2, exit_code=1)
    wait_state(cli, "r12", workdir, "failed (exit 1)")
    (run / "train.token").write_text("not a token; $(touch /tmp/x)\n")
    before = sorted(p.name for p in run.iterdir())
    r = cli("resume", "gpu", "r12", "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err.startswith("rtrain-tui: r12 on gpu: its train.token is not one rtrain-tui "
                            "wrote") and "bug" not in r.err, r.err
    assert sorted(p.name for p in run.iterdir()) == before


def test_resume_refuses_a_bad_from_before_any_connection(cli: Cli, workdir: str) -> None:
    """User input is validated before a connection is opened: on a host that refuses
    connections, a bad --from is what is said, not the connection."""
    for bad, says in ((["--from", "outputs/checkpoint-2/../../etc"], "points outside the run directory"),
                      (["--from", "outputs/epoch-2"], "is not a checkpoint-N directory")):
        r = cli("resume", "refused", "r1", "--workdir", workdir, *bad)
        assert (r.rc, r.out) == (1, ""), r
        assert says in r.err and "refused" not in r.err.replace("resume", ""), r.err


async def resume_here(hosts: SshHosts, index: Path, workdir: str, run_id: str) -> str:
    """Resume `run_id` in this process, with the index at `index` (a test steps in between
    its round trips): "resumed", or the RemoteError's line."""
    from rtrain_tui.core import ConnectionPool, Engine, RunIndex
    from rtrain_tui.core.errors import RemoteError

    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(index))
    try:
        await engine.resume("gpu", workdir, run_id)
    except RemoteError as exc:
        return str(exc)
    finally:
        await engine.close()
    return "resumed"


def stopped_after_a_checkpoint(cli: Cli, tmp_path: Path, workdir: str, run_id: str) -> Path:
    """A run started, stopped once it saved its first checkpoint; its run dir."""
    run = Path(workdir) / run_id
    start(cli, tmp_path, workdir, run_id, steps=10000, save_steps=2)
    wait_for("a checkpoint", lambda: (run / "outputs" / "checkpoint-2" / "trainer_state.json").exists())
    assert cli("stop", "gpu", run_id, "--grace", "5", "--workdir", workdir).rc == 0
    return run


def laptop_index(cli: Cli, tmp_path: Path) -> Path:
    """Another laptop's index: a copy of this one's files (the archives too)."""
    (tmp_path / "laptop").mkdir()
    for path in cli.index.parent.glob("runs*.toml"):
        shutil.copy(path, tmp_path / "laptop" / path.name)
    return tmp_path / "laptop" / "runs.toml"
