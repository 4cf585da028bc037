"""start, tail, status, stop and runs through the real CLI against a real sshd."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Cli, write_config
from tests.unit.test_validate import BAD_RUN_IDS


def wait_state(cli: Cli, run_id: str, workdir: str, want: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (got := cli("status", "gpu", run_id, "--workdir", workdir).out.strip()) != want:
        assert time.monotonic() < deadline, f"{run_id} is {got!r}, wanted {want!r}"
        time.sleep(0.2)


def start_long(cli: Cli, tmp_path: Path, workdir: str, run_id: str, **cfg: object) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", steps=10000, step_seconds=0.05, **cfg)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id, "--no-follow")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == f"started {run_id} on gpu"


def test_start_follow_streams_to_completion_and_records_the_run(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=4)
    data = tmp_path / "train data;$(touch PWNED) `id`.jsonl"
    data.write_text('{"text": "hello"}\n')
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
            "--env", "STANDIN_TEST_ENV=two words $HOME")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    run_id = lines[0].removeprefix("started ").removesuffix(" on gpu")
    assert lines[0] == f"started {run_id} on gpu" and run_id.startswith("run-")
    # (the program as invoked: see test_cli_rough_edges for the whole hint)
    assert lines[1].startswith("  tail: ") and lines[1].endswith(f" tail gpu {run_id} --workdir {workdir}")
    assert lines[2].startswith("  stop: ") and lines[2].endswith(f" stop gpu {run_id} --workdir {workdir}")
    assert f"argv=['llm', '{data.name}', '--config', 'config.yaml']" in lines[3]
    assert "env STANDIN_TEST_ENV=two words $HOME" in r.out
    assert "{'loss': 0.5000, 'step': 4, 'epoch': 1.00}" in r.out
    assert lines[-1] == f"{run_id} on gpu: completed"
    run_dir = Path(workdir) / run_id
    assert (run_dir / data.name).read_text() == '{"text": "hello"}\n'
    assert (run_dir / "config.yaml").read_text() == config.read_text()
    assert not list(Path(workdir).rglob("PWNED")) and not (tmp_path / "PWNED").exists()
    assert not list(run_dir.glob("*.part"))
    runs = json.loads(cli("runs", "--json").out)
    assert [(x["host"], x["run_id"], x["state"]) for x in runs] == [("gpu", run_id, "completed")]
    assert runs[0]["started_at"]


def test_failed_run_exits_1_and_reads_failed(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=2, exit_code=3)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "bad")
    assert r.rc == 1
    assert r.out.splitlines()[-1] == "bad on gpu: failed (exit 3)"
    assert cli("status", "gpu", "bad", "--workdir", workdir).out == "failed (exit 3)\n"


def test_status_json_says_when_an_ended_runs_attempt_ended(cli: Cli, tmp_path: Path, workdir: str) -> None:
    """`status --json`'s attempt of a run never resumed said `ended: null` (nothing in
    attempts.jsonl) while the host knew it (its `status` file, as `runs` records it)."""
    from datetime import UTC, datetime

    config = write_config(tmp_path / "c.yaml", steps=2, exit_code=3)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "ended").rc == 1
    got = json.loads(cli("status", "gpu", "ended", "--workdir", workdir, "--json").out)
    mtime = int((Path(workdir) / "ended" / "status").stat().st_mtime)
    assert got["attempts"][-1]["ended"] == datetime.fromtimestamp(mtime, UTC).isoformat()
    assert got["attempts"][-1]["state"] == "failed (exit 3)"


def test_trainer_template_and_gpus_reach_the_command(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir, "--run-id", "tmpl",
            "--gpus", "2", "--allow-busy",  # the stand-in host's GPU 1 is 97% busy
            "--trainer", "env NPROC={gpus} {python} -m praisonai_train llm {dataset} --config {config}")
    assert r.rc == 0, r.err
    assert "completed" in r.out.splitlines()[-1]
    assert "env NPROC=2 python3 -m praisonai_train llm d.jsonl --config config.yaml" in (
        Path(workdir) / "tmpl" / "run.sh").read_text()


def test_every_command_of_a_compound_template_logs_and_its_cd_moves_no_status(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """`A; B && cd /`: A's output reached the wrapper's stdout, not train.log (only the
    last command was redirected), and a `cd` in the template would move where `status`
    is written."""
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "compound",
            "--trainer", "echo compound-first; {python} -m praisonai_train llm --config {config} && cd /")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-1] == "compound on gpu: completed", r.out
    assert "compound-first" in (Path(workdir) / "compound" / "train.log").read_text()
    assert (Path(workdir) / "compound" / "status").read_text() == "0\n"


def test_a_trainer_template_using_dataset_without_d_is_refused_before_anything_is_shipped(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """It used to render `{dataset}` as nothing: the trainer failed on the host, no reason."""
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "nodata",
            "--trainer", "{python} train.py --data {dataset} --config {config}")
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: the --trainer template uses {dataset} but no dataset was given: "
                     "add -d DATASET, or take {dataset} out of the template.\n")
    assert not Path(workdir).exists()  # nothing reached the host
    # The built-in command takes its dataset as optional (the config may name one).
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "plain").rc == 0


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_bad_run_ids_are_refused_before_connecting(cli: Cli, tmp_path: Path, run_id: str) -> None:
    config = write_config(tmp_path / "c.yaml")
    # `refused` has no sshd: a connection attempt would show as "cannot reach".
    r = cli("start", "refused", "-c", str(config), f"--run-id={run_id}", "--workdir", str(tmp_path / "w"))
    assert r.rc == 1
    assert r.err.startswith(f"rtrain-tui: run id {run_id!r} is not usable")
    assert not Path("/tmp/pwned").exists() and not (tmp_path / "w").exists()
    assert cli("status", "refused", "--", run_id).err.startswith(f"rtrain-tui: run id {run_id!r} is not usable")


def test_bad_workdir_env_and_missing_files_are_refused(cli: Cli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    r = cli("start", "refused", "-c", str(config), "--workdir", "~/x; rm -rf /")
    assert r.err.strip() == ("rtrain-tui: refused: workdir '~/x; rm -rf /' may only contain letters, "
                             "digits and ._-/~ -- it is expanded by the remote shell.")
    assert "KEY=VALUE" in cli("start", "refused", "-c", str(config), "--env", "A;id=1").err
    r = cli("start", "refused", "-c", str(config), "--env", "IFS=:")
    assert r.rc == 1 and r.err == ("rtrain-tui: --env IFS is not usable: the run's wrapper on "
                                   "the host relies on it (RTRAIN_*, RT_*, IFS and proc are "
                                   "rtrain-tui's own); use another name.\n")
    assert "config file 'nope.yaml' does not exist" in cli("start", "refused", "-c", "nope.yaml").err
    r = cli("start", "refused", "-c", str(config), "-d", str(tmp_path / "none.jsonl"))
    assert r.rc == 1 and "dataset file" in r.err
    assert cli("start", "gpu").rc == 2  # usage error: -c is required


def test_preflight_failure_refuses_before_uploading(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml")
    r = cli("start", "gpu", "-c", str(config), "--gpus", "8", "--workdir", workdir)
    assert r.rc == 1 and r.err.strip() == "rtrain-tui: gpu is not ready: needs 8 GPU(s), found 2"
    assert not Path(workdir).exists()


def test_existing_run_id_is_refused(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    # On CPU: while the first still runs, its GPU is taken, and that refusal would come first.
    cpu = ("--gpus", "0")
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "dup", *cpu).rc == 0
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "dup", *cpu)
    assert r.rc == 1 and "run id 'dup' already exists on gpu" in r.err


def test_two_starts_in_one_second_get_distinct_ids(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    # CPU runs: three at once on a host with one free GPU would (rightly) refuse two.
    procs = [cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpus", "0",
                       "--no-follow") for _ in range(3)]
    firsts = [p.communicate(timeout=60)[0].splitlines()[0] for p in procs]
    assert len(set(firsts)) == 3 and all(f.startswith("started run-") for f in firsts)


def test_default_workdir_is_created_private_under_remote_home(cli: Cli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "cpu", "-c", str(config), "--gpus", "0", "--run-id", "homerun")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[1].endswith(" tail cpu homerun")  # no --workdir: the default
    wd = cli.hosts.remote_homes["cpu"] / ".praisonai-train"
    assert (wd / "homerun" / "status").read_text().strip() == "0"
    assert oct(wd.stat().st_mode & 0o777) == "0o700"


def test_stop_terminates_the_whole_group_and_tail_ends(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_long(cli, tmp_path, workdir, "long", children=2)
    tail = cli.popen("tail", "gpu", "long", "--workdir", workdir)
    wait_state(cli, "long", workdir, "running")
    time.sleep(0.5)
    log = (Path(workdir) / "long" / "train.log").read_text()
    children = [int(p) for p in log.split("children=")[1].split()[0].split(",")]
    r = cli("stop", "gpu", "long", "--workdir", workdir)
    assert (r.rc, r.out) == (0, "stopped long on gpu\n"), r.err
    for pid in children:
        assert not _alive(pid), f"child {pid} survived the stop"
    out, err = tail.communicate(timeout=20)
    assert tail.returncode == 1
    assert out.splitlines()[-1] == "long on gpu: stopped"
    assert cli("status", "gpu", "long", "--workdir", workdir).out == "stopped\n"
    assert cli("stop", "gpu", "long", "--workdir", workdir).out == "long was not running on gpu\n"
    # a later tail replays the whole log and ends at once
    again = cli("tail", "gpu", "long", "--workdir", workdir, timeout=20)
    assert again.out.splitlines()[0].startswith("argv=") and again.out.endswith("long on gpu: stopped\n")


@pytest.mark.serial
def test_trainer_ignoring_sigterm_is_killed_after_grace(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_long(cli, tmp_path, workdir, "stubborn", ignore_term=True)
    wait_state(cli, "stubborn", workdir, "running")
    began = time.monotonic()
    r = cli("stop", "gpu", "stubborn", "--workdir", workdir, "--grace", "1")
    assert r.out == "stopped stubborn on gpu\n", r.err
    assert time.monotonic() - began >= 1
    assert "ignoring SIGTERM" in (Path(workdir) / "stubborn" / "train.log").read_text()
    assert cli("status", "gpu", "stubborn", "--workdir", workdir).out == "stopped\n"


def test_tail_ends_as_lost_when_the_wrapper_is_killed(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_long(cli, tmp_path, workdir, "victim")
    tail = cli.popen("tail", "gpu", "victim", "--workdir", workdir)
    wait_state(cli, "victim", workdir, "running")
    pid = int((Path(workdir) / "victim" / "train.pid").read_text())
    os.killpg(pid, signal.SIGKILL)  # the OOM-killer's way: no status gets written
    out, _ = tail.communicate(timeout=20)
    assert out.splitlines()[-1] == "victim on gpu: lost" and tail.returncode == 1


def test_tail_shows_carriage_return_bars_as_lines_and_survives_bad_utf8(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=3, progress_bar=True, bad_utf8=True)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "bars").rc == 0
    r = cli("tail", "gpu", "bars", "--workdir", workdir)
    assert r.rc == 0
    assert "progress 2/3" in r.out.splitlines()
    assert "bad byte \ufffd here" in r.out.splitlines()
    assert r.out.count("'step': 3") == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_following_detaches_and_says_the_run_goes_on(
        cli: Cli, tmp_path: Path, workdir: str, sig: signal.Signals) -> None:
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    p = cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "det")
    wait_state(cli, "det", workdir, "running")
    time.sleep(0.5)
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    said = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert p.returncode == (143 if sig == signal.SIGTERM else 130), err
    last = err.splitlines()[-1]
    assert last.startswith(f"rtrain-tui: {said}: detached from det on gpu: nothing was stopped, "
                           "the run keeps going; `"), err
    assert last.endswith(f" tail gpu det --workdir {workdir}` follows it again."), err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert cli("status", "gpu", "det", "--workdir", workdir).out == "running\n"


def test_a_signal_during_stop_says_whether_the_run_stopped(cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Cancelled inside the grace period: SIGTERM was sent, the run (which ignores it) is
    still running, and the line says both, and how to stop it; it used to say only
    "nothing on the host was stopped", even after SIGTERM had gone out."""
    start_long(cli, tmp_path, workdir, "stubborn", ignore_term=True)
    wait_state(cli, "stubborn", workdir, "running")
    log = Path(workdir) / "stubborn" / "train.log"
    p = cli.popen("stop", "gpu", "stubborn", "--workdir", workdir, "--grace", "60")
    deadline = time.monotonic() + 20
    while "ignoring SIGTERM" not in log.read_text():
        assert p.poll() is None and time.monotonic() < deadline, "no SIGTERM reached the run"
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert (p.returncode, out) == (143, ""), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("rtrain-tui: terminated (SIGTERM): stop cancelled after SIGTERM sent to "
                          "the run's "), err
    assert "; stubborn is still running on gpu (it may still be saving a checkpoint); `" in err
    assert err.rstrip().endswith(f" stop gpu stubborn --workdir {workdir}` stops it."), err
    assert cli("status", "gpu", "stubborn", "--workdir", workdir).out == "running\n"


def test_runs_refresh_updates_states_and_marks_unreachable_hosts_stale(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "a", "--no-follow").rc == 0
    from rtrain_tui.core.runs.index import RunIndex, RunRecord
    RunIndex(cli.index).add(RunRecord(host="refused", run_id="old", workdir="~/w", state="running"))
    time.sleep(1.5)
    r = cli("runs", "--refresh", "--json")
    states = {x["run_id"]: (x["state"], x["stale"]) for x in json.loads(r.out)}
    assert states == {"a": ("completed", False), "old": ("running", True)}
    table = cli("runs").out
    assert "running (stale)" in table and "HOST" in table.splitlines()[0]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return not stat.rsplit(") ", 1)[1].startswith("Z")


def test_a_dataset_already_on_the_host_is_not_sent_again(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = tmp_path / "big data.jsonl"
    data.write_bytes(b'{"text": "x"}\n' * 20000)
    for run_id in ("first", "second"):
        r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir, "--run-id", run_id)
        assert r.rc == 0, r.err
    cached = list((Path(workdir) / ".datasets").iterdir())
    assert [p.name for p in cached] == [__import__("hashlib").sha256(data.read_bytes()).hexdigest()]
    # one inode for all three: the second start linked the verified copy, sent nothing
    inodes = {p.stat().st_ino for p in (cached[0], Path(workdir) / "first" / data.name,
                                         Path(workdir) / "second" / data.name)}
    assert len(inodes) == 1
    assert (Path(workdir) / "second" / data.name).read_bytes() == data.read_bytes()


def test_later_commands_find_the_workdir_start_recorded(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "rec").rc == 0
    assert cli("status", "gpu", "rec").out == "completed\n"
    r = cli("fetch", "gpu", "rec", "train.log", "--out", str(tmp_path / "o"))
    assert r.rc == 0 and (tmp_path / "o" / "train.log").exists()
    # a run the index does not know is looked for in the default workdir
    r = cli("status", "gpu", "never-started")
    assert r.rc == 1 and r.err.startswith("rtrain-tui: no run never-started on gpu")


def test_runs_names_each_skipped_record_on_stderr_and_refreshes_the_rest(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """A token that is text but not a token (it names a lock file) crashed every refresh;
    `runs` named no skipped record, and said "no runs yet" when all were skipped."""
    config = write_config(tmp_path / "c.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "good").rc == 0
    bad = ('\n[[runs]]\nhost = "gpu"\nrun_id = "dots"\nworkdir = "~/w"\nstate = "starting"\n'
           'token = "../../../tmp/x"\n'
           '\n[[runs]]\nhost = "gpu"\nrun_id = "num"\nworkdir = "~/w"\ntoken = 5\n'
           '\n[[runs]]\nhost = "gpu"\nrun_id = "bird"\nworkdir = "~/w"\nbackend = "pigeon"\n')
    with cli.index.open("a") as f:
        f.write(bad)
    for args in (("runs", "--refresh"), ("runs", "--refresh", "--json"), ("runs", "--json"), ("runs",)):
        r = cli(*args)
        assert r.rc == 0, (args, r.err)
        warned = r.err.splitlines()
        assert len(warned) == 3, (args, r.err)
        # Numbered in runs.toml: `good` ended, so it moved to its month's archive.
        for line, (n, name, what) in zip(warned, [(1, "dots", "token"), (2, "num", "token"),
                                                  (3, "bird", "backend")]):
            assert f"run #{n} ('gpu'/'{name}')" in line and what in line, line
        if "--json" in args:
            assert [(x["run_id"], x["state"]) for x in json.loads(r.out)] == [("good", "completed")]
        else:
            assert "good" in r.out and "completed" in r.out
    cli.index.write_text(bad)
    for archive in cli.index.parent.glob("runs-*.toml"):
        archive.unlink()
    r = cli("runs")
    assert r.rc == 0 and "no runs yet" not in r.out + r.err
    assert "no usable runs" in r.err and len(r.err.splitlines()) == 4


def test_runs_refresh_without_demo_says_to_add_it_and_leaves_demo_runs_alone(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Without --demo, `demo` went to DNS and every demo run turned stale."""
    from rtrain_tui.core.runs.index import RunIndex, RunRecord
    config = write_config(tmp_path / "c.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "box").rc == 0
    RunIndex(cli.index).add(RunRecord(host="demo", run_id="demo-run", workdir="~/.praisonai-train",
                                      state="running"))
    r = cli("runs", "--refresh", "--json")
    assert r.rc == 0, r.err
    assert r.err.strip() == ("rtrain-tui: 1 run on the demo host not refreshed: add --demo "
                             "(rtrain-tui --demo runs --refresh).")
    states = {x["run_id"]: (x["state"], x["stale"]) for x in json.loads(r.out)}
    assert states == {"box": ("completed", False), "demo-run": ("running", False)}
    r = cli("runs", "--discover")
    assert r.rc == 0 and "add --demo" in r.err and "cannot reach" not in r.err, r.err
    # With --demo it is served and refreshed (this run is not on it: unknown, not stale).
    r = cli("--demo", "runs", "--refresh", "--json")
    assert r.rc == 0 and r.err == "", r.err
    states = {x["run_id"]: (x["state"], x["stale"]) for x in json.loads(r.out)}
    assert states == {"box": ("completed", False), "demo-run": ("unknown", False)}


def test_start_says_how_its_dataset_went_once_the_progress_line_is_gone(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The upload's progress line is transient: after it, one line on stderr says what was
    sent (and how much went on the wire), or that the host had it already. Text repeats
    well, so it goes compressed; the second start of the same data sends nothing."""
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = tmp_path / "train.jsonl"
    rnd = random.Random(7)
    words = ["".join(rnd.choices("abcdefghijklmnop", k=rnd.randint(2, 8))) for _ in range(3000)]
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": " ".join(
        rnd.choices(words, k=30))}]}) + "\n" for _ in range(8000)))
    size = data.stat().st_size
    first = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
                "--run-id", "one", "--no-follow")
    assert first.rc == 0, first.err
    said = [line for line in first.err.splitlines() if line.startswith("rtrain-tui: train.jsonl: ")]
    assert len(said) == 1, first.err
    assert re.fullmatch(rf"rtrain-tui: train\.jsonl: sent {size / 1e6:.1f} MB as \d+(\.\d)? kB "
                        r"\(\d\.\d× compressed\) in \d+\.\d s", said[0]), said[0]
    again = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
                "--run-id", "two", "--no-follow")
    assert again.rc == 0, again.err
    assert "rtrain-tui: train.jsonl: already on gpu, nothing sent" in again.err.splitlines()
    assert again.out.splitlines()[0] == "started two on gpu"  # stdout as scripts read it
