"""Notifications sent by the run's own host (issue 19), against the real sshd and a real
HTTP receiver that the host's curl (or its Python) posts to: the end arrives with every
client closed, once even when a client sees it too; a refusing URL harms nothing and is
one line in the run's notify.log; no token in train.log, status --json or `ps`."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.notify import host_send
from rtrain_tui.core.safety.mask import mask_url
from tests.conftest import Cli, write_config
from tests.notify_receiver import Receiver
from tests.sshd import SshHosts
from tests.test_notify_sshd import _config_toml_removed_after, ended  # noqa: F401 (a fixture)
from tests.test_resume_sshd import wait_for

SECRET = "SECRETtoken123"


def configure(cli: Cli, text: str) -> None:
    """config.toml with `text`: `[notify] on_host` left to its default (true)."""
    config = cli.hosts.home / ".config" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")


def start(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str,
          cli_env: dict[str, str] | None = None, **settings: object) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", **settings)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", "--gpus", "0", *extra, env=cli_env)
    assert r.rc == 0, r.err


def notify_log(workdir: str, run_id: str) -> list[str]:
    path = Path(workdir) / run_id / "notify.log"
    return path.read_text().splitlines() if path.exists() else []


def command_lines() -> str:
    """Every process's command line on this machine (the host's `ps`), NULs as spaces."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:
            pass
    return "\n".join(found)


def test_a_failed_run_is_told_by_its_host_with_no_client_running_within_10_s(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url(SECRET)}"]\n[hosts.gpu]\nprice_per_hour = 3600\n')
    # Slow enough that the start command (and its SSH connection) is long gone when the
    # trainer dies: nothing of rtrain-tui runs anywhere then.
    start(cli, tmp_path, workdir, "h1", steps=6, save_steps=2, die_mid_save=4, step_seconds=1)
    assert not ended(workdir, "h1"), "the run ended before the start command did"
    run_dir = Path(workdir) / "h1"
    assert stat.S_IMODE((run_dir / "notify.json").stat().st_mode) == 0o600
    wait_for("the run to fail", lambda: ended(workdir, "h1"))
    ended_at = time.monotonic()
    wait_for("the host's message", lambda: bool(receiver.messages()))
    assert time.monotonic() - ended_at < 10, f"{time.monotonic() - ended_at:.1f} s"
    got = receiver.messages()
    assert len(got) == 1, got
    title, body = str(got[0]["title"]), str(got[0]["message"])
    assert title == "rtrain-tui: h1 on gpu failed (exit 137)"
    assert "reason: " in body and "step 4" in body and "loss " in body
    assert "cost $" in body and "elapsed " in body
    assert "look: rtrain-tui tail gpu h1" in body and "resume: rtrain-tui resume gpu h1" in body
    assert got[0]["path"] == f"/{SECRET}"
    assert (run_dir / "notified" / "a1-failed").is_dir()
    # The receiver records a POST before it answers: the sender's line comes after that.
    wait_for("the notify log's line", lambda: bool(notify_log(workdir, "h1")))
    [line] = notify_log(workdir, "h1")
    assert line.endswith(": sent (curl)") and " failed to json://12" in line and SECRET not in line
    # A client that looks afterwards finds it told: nothing more is sent, nothing said.
    refresh = cli("runs", "--refresh")
    assert refresh.rc == 0 and "failed (exit 137)" in refresh.out and "not sent" not in refresh.err
    status = cli("status", "gpu", "h1", "--workdir", workdir, "--json")
    assert len(receiver.messages()) == 1
    for text in ((run_dir / "train.log").read_text(), status.out, status.err, refresh.out, refresh.err):
        assert SECRET not in text


def test_one_message_when_client_refreshes_race_the_host_for_the_end(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start(cli, tmp_path, workdir, "h2", steps=6, save_steps=2, die_mid_save=4, step_seconds=0.1)
    # Refreshes all the while the run ends: whoever claims the end first sends it.
    wait_for("the message", lambda: cli("runs", "--refresh").rc == 0 and bool(receiver.messages()))
    pid = int((Path(workdir) / "h2" / "train.pid").read_text())
    wait_for("the wrapper to end", lambda: not Path(f"/proc/{pid}").exists()
             or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
    for _ in range(2):
        assert cli("runs", "--refresh", "--all").rc == 0
    got = receiver.messages()
    assert len(got) == 1 and got[0]["title"] == "rtrain-tui: h2 on gpu failed (exit 137)"
    assert len(list((Path(workdir) / "h2" / "notified").iterdir())) == 1


def test_a_refusing_url_leaves_the_run_and_its_exit_unharmed_and_is_said_once_in_its_notify_log(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    receiver.status = 500
    configure(cli, f'[notify]\nurls = ["{receiver.url(SECRET)}", "json://127.0.0.1:9/{SECRET}"]\n'
                   'on = ["completed", "failed"]\n')
    start(cli, tmp_path, workdir, "h3", steps=3, step_seconds=0.05)
    wait_for("the run to complete", lambda: ended(workdir, "h3"))
    assert (Path(workdir) / "h3" / "status").read_text().strip() == "0"
    wait_for("both URLs said in the notify log", lambda: len(notify_log(workdir, "h3")) == 2)
    lines = notify_log(workdir, "h3")
    assert all(" completed to json://12" in line and ": not sent: " in line and "(3 tries)" in line
               for line in lines), lines
    assert "HTTP 500" in lines[0]
    assert len(receiver.messages()) == 3  # the refusing one, tried three times
    status = cli("status", "gpu", "h3", "--workdir", workdir, "--json")
    assert json.loads(status.out)["state"] == "completed"
    refresh = cli("runs", "--refresh")
    assert "completed" in refresh.out and "not sent" not in refresh.err  # the host said it
    for text in ("\n".join(lines), (Path(workdir) / "h3" / "train.log").read_text(), status.out,
                 status.err, refresh.err):
        assert SECRET not in text
    assert len(receiver.messages()) == 3


def test_no_token_reaches_the_process_list_while_the_host_sends(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    receiver.hold = threading.Event()  # a slow service: the POST is under way while we look
    configure(cli, f'[notify]\nurls = ["{receiver.url(SECRET)}"]\n')
    try:
        start(cli, tmp_path, workdir, "h4", steps=6, save_steps=2, die_mid_save=4, step_seconds=0.1)
        wait_for("the POST", lambda: bool(receiver.messages()))
        lines = command_lines()
        assert "notify.pyz failed 137" in lines and "curl --config -" in lines
        assert SECRET not in lines
    finally:
        receiver.hold.set()
    wait_for("the notify log", lambda: bool(notify_log(workdir, "h4")))
    assert notify_log(workdir, "h4")[0].endswith(": sent (curl)")


def test_a_host_without_curl_sends_with_the_runs_own_python(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    # The wrapper's PATH has every command of this machine but curl (and the host's python3).
    bare = tmp_path / "no-curl-bin"
    bare.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in Path(directory).iterdir():
            if tool.name != "curl" and not (bare / tool.name).exists() and os.access(tool, os.X_OK):
                (bare / tool.name).symlink_to(tool)
    (bare / "python3").unlink(missing_ok=True)
    (bare / "python3").symlink_to(sys.executable)
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start(cli, tmp_path, workdir, "h5", "--env", f"PATH={bare}", steps=6, save_steps=2, die_mid_save=4,
          step_seconds=0.1)
    wait_for("the host's message", lambda: bool(receiver.messages()))
    assert receiver.messages()[0]["title"] == "rtrain-tui: h5 on gpu failed (exit 137)"
    wait_for("the notify log", lambda: bool(notify_log(workdir, "h5")))
    assert notify_log(workdir, "h5")[0].endswith(": sent (python)")


def test_a_stall_is_told_by_the_hosts_watchdog(cli: Cli, tmp_path: Path, workdir: str,
                                              receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start(cli, tmp_path, workdir, "h6", "--stall-after", "2s", steps=100, step_seconds=0.05, hang_at=3,
          cli_env={retry_rule.STALL_CHECK_ENV: "0.2"})
    try:
        wait_for("the stall's message", lambda: bool(receiver.messages()))
        got = receiver.messages()
        assert len(got) == 1 and str(got[0]["title"]).startswith("rtrain-tui: h6 on gpu stalled: no output for ")
        assert "stop: rtrain-tui stop gpu h6" in str(got[0]["message"])
        assert (Path(workdir) / "h6" / "notified" / "a1-stalled").is_dir()
    finally:
        assert cli("stop", "gpu", "h6", "--workdir", workdir, "--grace", "1").rc == 0


def test_notify_test_host_sends_from_the_host_too_and_says_which_arrived_from_where(
        cli: Cli, receiver: Receiver) -> None:
    # The second URL has apprise options: only a client (apprise) can send it; its port is shut.
    hook, shut = receiver.url(SECRET), f"json://127.0.0.1:9/{SECRET}?rto=1"
    configure(cli, f'[notify]\nurls = ["{hook}", "{shut}"]\n')
    r = cli("notify", "test", "gpu")
    assert r.rc == 1, r.err  # the shut port, from this machine
    assert SECRET not in r.out + r.err
    lines = r.out.splitlines()
    assert lines[0] == f"{mask_url(hook)}: arrived" and lines[1].startswith(f"{mask_url(shut)}: not sent: ")
    assert lines[2:] == [f"{mask_url(hook)}: arrived from gpu",
                         f"{mask_url(shut)}: not sent from gpu: only apprise can send it, from a client"]
    got = {str(m["message"]) for m in receiver.messages()}
    assert len(receiver.messages()) == 2 and all(m["title"] == "rtrain-tui: test" for m in receiver.messages())
    assert got == {"A test message from rtrain-tui notify test.",
                   "A test message from rtrain-tui notify test, sent by gpu itself (curl)."}
    # Its scratch dir is gone from the host.
    assert not list((cli.hosts.remote_homes["gpu"] / ".praisonai-train").glob(".notify-test.*"))


def test_notify_test_host_with_only_urls_apprise_sends_says_the_host_sends_none(
        cli: Cli, receiver: Receiver) -> None:
    # Every URL has apprise options: HOST is not asked, and said nothing of HOST at all, as
    # if it had been left out, where the docs promise a line per URL saying it is left to clients.
    url = f"{receiver.url(SECRET)}?rto=5"
    configure(cli, f'[notify]\nurls = ["{url}"]\n')
    r = cli("notify", "test", "gpu")
    assert r.rc == 0, r.err
    assert SECRET not in r.out + r.err
    assert r.out.splitlines() == [f"{mask_url(url)}: arrived",
                                  f"{mask_url(url)}: not sent from gpu: only apprise can send it, from a client"]
    assert len(receiver.messages()) == 1


def test_notify_test_host_never_writes_a_token_on_the_host_even_when_killed_mid_send(
        cli: Cli, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url(SECRET)}"]\n')
    receiver.hold, receiver.hold_after = threading.Event(), 1  # this machine's POST answered, the host's held
    workdir = cli.hosts.remote_homes["gpu"] / ".praisonai-train"

    def holding_a_token() -> list[Path]:
        return [p for p in workdir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]

    proc = cli.popen("notify", "test", "gpu")
    try:
        wait_for("the host's POST", lambda: len(receiver.messages()) == 2)
        assert holding_a_token() == []  # its settings went to notify.pyz on stdin
        proc.kill()
        proc.wait(30)
        assert holding_a_token() == []
    finally:
        receiver.hold.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_urls_only_apprise_reaches_are_still_sent_by_a_client_after_the_host_told_the_rest(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    # `?rto=5`: an apprise option, so only a client can send that URL.
    configure(cli, f'[notify]\nurls = ["{receiver.url("hook")}", "{receiver.url("apprise")}?rto=5"]\n')
    start(cli, tmp_path, workdir, "h7", steps=6, save_steps=2, die_mid_save=4, step_seconds=0.1)
    wait_for("the host's message", lambda: bool(receiver.messages()))
    assert [m["path"] for m in receiver.messages()] == ["/hook"]
    for _ in range(3):  # the first refresh sends apprise's share; the others nothing
        assert cli("runs", "--refresh", "--all").rc == 0
    got = receiver.messages()
    assert sorted(str(m["path"]) for m in got) == ["/apprise", "/hook"]
    assert len({m["title"] for m in got}) == 1
    assert sorted(p.name for p in (Path(workdir) / "h7" / "notified").iterdir()) == [
        "a1-failed", "a1-failed-apprise"]


def test_a_resumed_runs_next_end_is_told_by_its_host_too(cli: Cli, tmp_path: Path, workdir: str,
                                                         receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start(cli, tmp_path, workdir, "h8", steps=6, save_steps=2, die_mid_save=4, step_seconds=0.1)
    wait_for("the first end's message", lambda: bool(receiver.messages()))
    wait_for("the wrapper's end", lambda: ended(workdir, "h8"))
    r = cli("resume", "gpu", "h8", "--workdir", workdir)
    assert r.rc == 0, r.err
    wait_for("the second end's message", lambda: len(receiver.messages()) == 2)
    assert [m["title"] for m in receiver.messages()] == ["rtrain-tui: h8 on gpu failed (exit 137)",
                                                         "rtrain-tui: h8 on gpu completed"]
    assert sorted(p.name for p in (Path(workdir) / "h8" / "notified").iterdir()) == ["a1-failed", "a2-completed"]
    wait_for("the host's second line", lambda: len(notify_log(workdir, "h8")) == 2)
    assert " completed to " in notify_log(workdir, "h8")[1]


def test_notify_test_with_a_host_that_is_not_one_sends_nothing_and_says_so(
        cli: Cli, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url(SECRET)}"]\n')
    r = cli("notify", "test", "gpux")
    assert r.rc == 1 and r.out == "", r.out
    assert r.err.startswith("rtrain-tui: gpux is not in") and r.err.rstrip().endswith("did you mean gpu?"), r.err
    assert receiver.messages() == []


def test_notify_test_host_whose_sender_hangs_says_it_timed_out(
        hosts: SshHosts, tmp_path: Path, workdir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host's "python" hangs past the limit (1 s here): the error names the timeout,
    # not an empty pair of brackets (a TimeoutError has no text of its own).
    hang = hosts.remote_homes["gpu"] / "hang.sh"
    hang.write_text("#!/bin/sh\ncat > /dev/null\nsleep 5\n")
    hang.chmod(0o755)
    monkeypatch.setattr(host_send, "TEST_WITHIN_S", -29.0)  # the client waits TEST_WITHIN_S + 30
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))

    async def go() -> str:
        try:
            await engine.notify_test_from_host("gpu", [f"json://127.0.0.1:9/{SECRET}"],
                                               workdir=workdir, python="~/hang.sh")
        except RemoteError as exc:
            return str(exc)
        finally:
            await engine.close()
        return ""

    said = asyncio.run(go())
    assert said == "gpu: no answer from its sender (timed out).", said


def wait_running(workdir: str, run_id: str) -> None:
    """Its trainer has printed a step: its SIGTERM handler is in place."""
    log = Path(workdir) / run_id / "train.log"
    wait_for("the trainer's first step", lambda: log.exists() and "'step': 1," in log.read_text())


def test_a_stop_the_trainer_answers_with_exit_1_is_stopped_in_status_and_in_the_hosts_message(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    """R02: torchrun and Lightning answer our stop's SIGTERM with exit 1; it was our stop,
    and the host tells `stopped`, never `failed (exit 1)`."""
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\non = ["failed", "stopped"]\n')
    start(cli, tmp_path, workdir, "h9", steps=600, step_seconds=0.1, term_exit=1)
    wait_running(workdir, "h9")
    # From here on only the host sends (its notify.json was written at the start): what
    # arrives is the host's own word for the end.
    configure(cli, "")
    r = cli("stop", "gpu", "h9", "--workdir", workdir)
    assert r.rc == 0, r.err
    run_dir = Path(workdir) / "h9"
    assert (run_dir / "status").read_text().strip() == "1"  # the trainer's own answer
    status = json.loads(cli("status", "gpu", "h9", "--workdir", workdir, "--json").out)
    assert (status["state"], status["exit_code"]) == ("stopped", 1)
    wait_for("the host's message", lambda: bool(receiver.messages()))
    assert [m["title"] for m in receiver.messages()] == ["rtrain-tui: h9 on gpu stopped"]
    assert sorted(p.name for p in (run_dir / "notified").iterdir()) == ["a1-stopped"]
    wait_for("the host's line", lambda: bool(notify_log(workdir, "h9")))
    assert " stopped to " in notify_log(workdir, "h9")[0]


def test_a_stop_answered_with_exit_1_is_not_told_when_stopped_is_not_asked_for(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    """R02: `on` without `stopped` (the default's): our stop is told by no one, though
    the trainer exited 1 and `failed` is asked for."""
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start(cli, tmp_path, workdir, "h10", steps=600, step_seconds=0.1, term_exit=1)
    wait_running(workdir, "h10")
    assert cli("stop", "gpu", "h10", "--workdir", workdir).rc == 0
    pid = int((Path(workdir) / "h10" / "train.pid").read_text())
    wait_for("the wrapper to end", lambda: not Path(f"/proc/{pid}").exists()
             or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
    refresh = cli("runs", "--refresh")
    assert refresh.rc == 0 and " stopped" in refresh.out, refresh.out
    time.sleep(2)  # a detached sender would have posted by now (the first test: under 10 s)
    assert receiver.messages() == []
    assert notify_log(workdir, "h10") == []
