"""The remote shell text, run under the local /bin/sh: liveness, states, quoting."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.engine import trainer_command
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes


def sh(script: str, cwd: Path | None = None) -> str:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                          cwd=cwd, timeout=30).stdout


def state_of(workdir: Path, run_id: str) -> str:
    out = sh(direct_sh.run_states([(str(workdir), run_id)]))
    return probes.parse_run_states(out, 1)[0].state


TOKEN = "0123456789abcdef0123456789abcdef"


def launch(workdir: Path, run_id: str, command: str, token: str | None = None) -> Path:
    """Launch a run of our own: its own token, as every real start has. One token shared
    by the tests let a stop in one (it signals every process carrying the run's marker)
    kill the runs of others running beside it in the parallel lane."""
    token = token or secrets.token_hex(16)
    out = sh(remote_sh.make_run_dir(str(workdir), run_id, token))
    run_dir = Path(out.strip().removeprefix("dir="))
    (run_dir / "run.sh").write_text(direct_sh.wrapper(command, {}))
    facts = dict(probes.parse_key_values(sh(direct_sh.launch(str(run_dir), token))))
    assert facts["pid"].isdigit()
    return run_dir


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_workdir_tilde_is_expanded_by_the_shell(tmp_path: Path) -> None:
    out = sh(f"HOME={tmp_path}; export HOME\n" + remote_sh.make_run_dir("~/wd", "r1", TOKEN))
    assert out.strip() == f"dir={tmp_path}/wd/r1"
    assert (tmp_path / "wd" / "r1").is_dir()
    assert oct((tmp_path / "wd").stat().st_mode & 0o777) == "0o700"
    other = "f" * 32
    assert sh(f"HOME={tmp_path}; export HOME\n" + remote_sh.make_run_dir("~/wd", "r1", other)).strip() == "exists"


def test_run_goes_running_then_completed_with_exit_code(tmp_path: Path) -> None:
    launch(tmp_path, "ok", "sleep 0.5; echo hi")
    assert state_of(tmp_path, "ok") == "running"
    wait_for(lambda: state_of(tmp_path, "ok") != "running")
    assert state_of(tmp_path, "ok") == "completed"
    assert (tmp_path / "ok" / "train.log").read_text() == "hi\n"


def test_failed_run_reads_failed_with_its_code(tmp_path: Path) -> None:
    launch(tmp_path, "bad", "sh -c 'exit 3'")
    wait_for(lambda: state_of(tmp_path, "bad") != "running")
    assert state_of(tmp_path, "bad") == "failed (exit 3)"


def test_trainer_killed_by_signal_records_128_plus_n(tmp_path: Path) -> None:
    run_dir = launch(tmp_path, "sig", "sleep 30")
    pid = int((run_dir / "train.pid").read_text())
    wait_for(lambda: _group_size(pid) >= 2)  # the trainer has been forked
    os.killpg(pid, 15)
    wait_for(lambda: state_of(tmp_path, "sig") != "running")
    assert state_of(tmp_path, "sig") == "failed (exit 143)"


def test_killed_wrapper_reads_lost_not_running(tmp_path: Path) -> None:
    run_dir = launch(tmp_path, "lost", "sleep 30")
    pid = int((run_dir / "train.pid").read_text())
    os.killpg(pid, 9)
    wait_for(lambda: state_of(tmp_path, "lost") != "running")
    assert state_of(tmp_path, "lost") == "lost"


def test_recycled_pid_never_reads_running(tmp_path: Path) -> None:
    """train.pid names a live process, but not the one recorded at launch."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)  # not our own group
    try:
        (run_dir / "train.pid").write_text(f"{other.pid}\n")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        (run_dir / "train.ident").write_text(f"1 {boot}\n")  # a start time that is not its own
        assert state_of(tmp_path, "old") == "lost"
        (run_dir / "train.ident").write_text(f"{_start_time(other.pid)} {boot}\n")
        assert state_of(tmp_path, "old") == "running"
        (run_dir / "train.ident").write_text(f"{_start_time(other.pid)} another-boot\n")
        assert state_of(tmp_path, "old") == "lost"
    finally:
        other.kill()
        other.wait()


def test_run_without_identity_is_live_only_in_its_own_run_dir(tmp_path: Path) -> None:
    """A `praisonai train remote` run (no train.ident): its pid counts only while that
    process works in the run directory, compared by physical path (a symlinked workdir
    is the same place); a process working elsewhere is a recycled pid."""
    real = tmp_path / "real"
    run_dir = real / "seed"
    run_dir.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    inside = subprocess.Popen(["sleep", "30"], cwd=run_dir, start_new_session=True)
    elsewhere = subprocess.Popen(["sleep", "30"], cwd=tmp_path, start_new_session=True)
    try:
        (run_dir / "train.pid").write_text(f"{inside.pid}\n")
        assert state_of(real, "seed") == "running"
        assert state_of(tmp_path / "link", "seed") == "running"
        (run_dir / "train.pid").write_text(f"{elsewhere.pid}\n")
        assert state_of(real, "seed") == "lost"
    finally:
        for p in (inside, elsewhere):
            p.kill()
            p.wait()


def test_link_or_copy_sent_again_links_nothing_new_and_says_linked(tmp_path: Path) -> None:
    src, dst = tmp_path / "store", tmp_path / "run" / "data set's.jsonl"
    dst.parent.mkdir()
    src.write_text("rows\n")
    for _ in range(2):  # the second sending finds its own link
        assert sh(remote_sh.link_or_copy(str(src), str(dst))) == "linked=1\n"
        assert dst.stat().st_ino == src.stat().st_ino
    dst.unlink()
    dst.write_text("a cut-off copy\n")  # something else under the name: replaced
    assert sh(remote_sh.link_or_copy(str(src), str(dst))) == "linked=1\n"
    assert dst.read_text() == "rows\n"


def test_free_kb_says_the_space_where_a_directory_is_and_nothing_when_it_cannot(
        tmp_path: Path) -> None:
    odd = tmp_path / "it's here"
    odd.mkdir()
    assert sh(remote_sh.free_kb(str(odd))).strip().isdigit()
    assert sh(remote_sh.free_kb(str(tmp_path / "missing"))) == ""


def test_zombie_wrapper_is_dead(tmp_path: Path) -> None:
    """A zombie answers kill -0; it must still read as gone."""
    zombie = subprocess.Popen(["true"])
    wait_for(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1].startswith("Z"))
    run_dir = tmp_path / "z"
    run_dir.mkdir()
    (run_dir / "train.pid").write_text(f"{zombie.pid}\n")
    try:
        assert state_of(tmp_path, "z") == "lost"
    finally:
        zombie.wait()


def test_missing_run_is_unknown(tmp_path: Path) -> None:
    assert state_of(tmp_path, "nope") == "unknown"


def test_one_probe_reports_many_runs_in_order(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "status").write_text(f"{i}\n")
    out = sh(direct_sh.run_states([(str(tmp_path), f"r{i}") for i in range(5)]))
    states = [p.state for p in probes.parse_run_states(out, 5)]
    assert states == ["completed"] + [f"failed (exit {i})" for i in range(1, 5)]


def test_stop_ladder_scripts_signal_the_group_and_count_it(tmp_path: Path) -> None:
    launch(tmp_path, "st", "sleep 30 & sleep 30")
    facts = dict(probes.parse_key_values(sh(direct_sh.stop_signal(str(tmp_path), "st", "ab" * 8))))
    assert facts["result"] == "signalled" and int(facts["count"]) >= 3  # wrapper + 2 sleeps
    wait_for(lambda: sh(direct_sh.run_alive_count(str(tmp_path), "st")).strip() == "alive=0")
    # the wrapper recorded the TERM as the seed's would (143); a stop of ours was asked
    # for, so that code is our stop's doing: `stopped` already, never "failed (exit 143)"
    # in the moment before the stop writes its verdict
    assert (tmp_path / "st" / "status").read_text() == "143\n"
    assert state_of(tmp_path, "st") == "stopped"
    sh(remote_sh.mark_stopped(str(tmp_path), "st", 143))
    assert state_of(tmp_path, "st") == "stopped"
    assert (tmp_path / "st" / "status").read_text() == "143\n"


def test_trainer_command_quotes_every_value() -> None:
    cmd = trainer_command("{python} -m praisonai_train llm {dataset} --config {config}",
                          "python3", "a b;$(touch x).jsonl", 1)
    assert cmd == "python3 -m praisonai_train llm 'a b;$(touch x).jsonl' --config config.yaml"
    assert trainer_command("{python} -m praisonai_train llm {dataset} --config {config}",
                           "python3", None, 1) == "python3 -m praisonai_train llm --config config.yaml"


def test_env_values_reach_the_wrapper_unexpanded(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text(direct_sh.wrapper("echo \"$V\"", {"V": "$(touch pwned) `id` 'q'"}))
    sh("sh ./run.sh", cwd=tmp_path)
    assert (tmp_path / "train.log").read_text() == "$(touch pwned) `id` 'q'\n"
    assert not (tmp_path / "pwned").exists()


def test_the_trainer_runs_unbuffered_unless_its_environment_says(tmp_path: Path) -> None:
    """Issue 15 item 19: PYTHONUNBUFFERED=1, unless `--env` or the host's environment set it."""
    probe = "echo \"[${PYTHONUNBUFFERED-unset}]\""
    (tmp_path / "run.sh").write_text(direct_sh.wrapper(probe, {}))
    subprocess.run(["/bin/sh", "./run.sh"], cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert (tmp_path / "train.log").read_text() == "[1]\n"
    subprocess.run(["/bin/sh", "./run.sh"], cwd=tmp_path, timeout=30,
                   env={"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": ""})
    assert (tmp_path / "train.log").read_text() == "[]\n"  # the host's own choice stands
    (tmp_path / "run.sh").write_text(direct_sh.wrapper(probe, {"PYTHONUNBUFFERED": "0"}))
    subprocess.run(["/bin/sh", "./run.sh"], cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert (tmp_path / "train.log").read_text() == "[0]\n"


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


def _group_size(group: int) -> int:
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, IndexError):
            continue
        count += fields[2] == str(group) and not fields[0].startswith("Z")
    return count


def test_the_transfer_program_greets_with_the_line_the_client_expects() -> None:
    from rtrain_tui.core.host.remote_sh import TRANSFER_PY
    from rtrain_tui.core.host.transfer_program import GREETING

    r = subprocess.run([sys.executable, "-c", TRANSFER_PY, "list", b"/nonexistent".hex(),
                        b"x".hex()], capture_output=True, timeout=30)
    assert r.stdout.split(b"\n")[0] == GREETING
