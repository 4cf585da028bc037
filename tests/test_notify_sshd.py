"""Notifications against the real sshd and a real HTTP receiver (issue 19): a run's end is
sent once, whoever sees it first, with its reason, loss and cost; a URL that refuses
harms nothing and is said once; no token is shown."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from tests.conftest import Cli, write_config
from tests.faults.proxy import FaultProxy
from tests.notify_receiver import Receiver
from tests.sshd import SshHosts
from tests.test_resume_sshd import wait_for


@pytest.fixture(autouse=True)
def _config_toml_removed_after(hosts: SshHosts) -> Iterator[None]:
    """config.toml is written in the test hosts' HOME, which every test of this worker
    shares: left there, its URLs and prices would reach the tests that run after."""
    yield
    (hosts.home / ".config" / "rtrain-tui" / "config.toml").unlink(missing_ok=True)


def configure(cli: Cli, text: str) -> None:
    """config.toml with `text`; the tests here are of the clients' sending, so with a
    `[notify]` that leaves the host's own (test_notify_host_sshd.py) off unless told."""
    if "[notify]\n" in text and "on_host" not in text:
        text = text.replace("[notify]\n", "[notify]\non_host = false\n", 1)
    config = cli.hosts.home / ".config" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")


def start_failing(cli: Cli, tmp_path: Path, workdir: str, run_id: str) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", steps=6, save_steps=2, die_mid_save=4,
                          step_seconds=0.1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", "--gpus", "0")
    assert r.rc == 0, r.err


def ended(workdir: str, run_id: str) -> bool:
    return (Path(workdir) / run_id / "status").exists()


def test_a_failed_run_is_told_once_with_its_reason_loss_and_cost(cli: Cli, tmp_path: Path, workdir: str,
                                                                 receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n[hosts.gpu]\nprice_per_hour = 3600\n')
    start_failing(cli, tmp_path, workdir, "r1")
    wait_for("the run to fail", lambda: ended(workdir, "r1"))
    first = cli("runs", "--refresh")
    assert first.rc == 0 and "failed (exit 137)" in first.out, first.err
    got = receiver.messages()
    assert len(got) == 1, got
    title, body = str(got[0]["title"]), str(got[0]["message"])
    assert title == "rtrain-tui: r1 on gpu failed (exit 137)"
    assert "reason: " in body and "loss " in body and "step " in body
    assert "cost $" in body and "elapsed " in body
    assert "look: rtrain-tui tail gpu r1" in body and "resume: rtrain-tui resume gpu r1" in body
    # Everyone else who looks finds it told: `status`, `tail`, another refresh, `--all`.
    assert cli("status", "gpu", "r1", "--workdir", workdir).out.strip() == "failed (exit 137)"
    assert cli("runs", "--refresh", "--all").rc == 0
    assert cli("tail", "gpu", "r1", "--workdir", workdir).out.strip().endswith("failed (exit 137)")
    assert len(receiver.messages()) == 1
    assert (Path(workdir) / "r1" / "notified" / "a1-failed").is_dir()


def test_status_that_sees_the_end_first_tells_it_and_the_refresh_after_does_not(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start_failing(cli, tmp_path, workdir, "r2")
    wait_for("the run to fail", lambda: ended(workdir, "r2"))
    assert cli("status", "gpu", "r2", "--workdir", workdir).out.strip() == "failed (exit 137)"
    assert len(receiver.messages()) == 1
    assert cli("runs", "--refresh").rc == 0
    assert len(receiver.messages()) == 1


def test_a_url_that_refuses_harms_nothing_and_is_said_once_masked(cli: Cli, tmp_path: Path, workdir: str,
                                                                  receiver: Receiver) -> None:
    receiver.status = 500
    secret = "SECRETtoken123"
    configure(cli, f'[notify]\nurls = ["{receiver.url(secret)}", "json://127.0.0.1:9/{secret}"]\n')
    start_failing(cli, tmp_path, workdir, "r3")
    wait_for("the run to fail", lambda: ended(workdir, "r3"))
    first = cli("runs", "--refresh")
    assert first.rc == 0 and "failed (exit 137)" in first.out
    lines = [line for line in first.err.splitlines() if "not sent" in line]
    assert len(lines) == 2, first.err  # one line per URL, after its retries
    assert len(receiver.messages()) == 3  # the refusing one was tried three times
    again = cli("runs", "--refresh", "--all")
    assert "not sent" not in again.err  # said once: the marker was claimed
    for text in (first.out, first.err, again.err, (Path(workdir) / "r3" / "train.log").read_text(),
                 cli("status", "gpu", "r3", "--workdir", workdir, "--json").out):
        assert secret not in text


def test_watch_and_refreshes_all_running_send_one_message_and_ctrl_c_ends_watch(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\n')
    start_failing(cli, tmp_path, workdir, "r4")
    watch = cli.popen("watch", "--every", "1")
    try:
        assert watch.stdout is not None
        assert watch.stdout.readline().startswith("watching the runs in ")
        # Whoever sees the end first: watch, or one of these refreshes racing it.
        wait_for("the message", lambda: cli("runs", "--refresh").rc == 0 and bool(receiver.messages()))
        for _ in range(3):
            assert cli("runs", "--refresh", "--all").rc == 0
            assert cli("status", "gpu", "r4", "--workdir", workdir).out.strip() == "failed (exit 137)"
        got = receiver.messages()
        assert len(got) == 1 and got[0]["title"] == "rtrain-tui: r4 on gpu failed (exit 137)"
    finally:
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 130
    assert err.strip().splitlines() == [
        "rtrain-tui: interrupted (Ctrl-C): watch ended; nothing on the host was stopped; a run keeps going."]
    assert len(receiver.messages()) == 1


def test_notify_test_says_which_url_arrived_and_shows_no_token(cli: Cli, receiver: Receiver) -> None:
    secret = "SECRETtoken123"
    configure(cli, f'[notify]\nurls = ["{receiver.url(secret)}"]\n'
                   f'[hosts.gpu]\nnotify = ["json://127.0.0.1:9/{secret}"]\n')
    r = cli("notify", "test")
    assert r.rc == 1 and secret not in r.out + r.err
    lines = r.out.splitlines()
    assert len(lines) == 2 and lines[0].endswith(": arrived") and ": not sent: " in lines[1]
    got = receiver.messages()
    assert len(got) == 1 and got[0]["title"] == "rtrain-tui: test" and got[0]["path"] == f"/{secret}"
    assert cli("notify", "test", "other-host").out.splitlines() == [lines[0]]


def test_a_refresh_does_not_wait_for_a_slow_service_and_the_engine_waits_before_it_closes(
        hosts: SshHosts, tmp_path: Path, workdir: str, receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    config_toml = tmp_path / "cfg" / "rtrain-tui" / "config.toml"
    config_toml.parent.mkdir(parents=True)
    config_toml.write_text(f'[notify]\non_host = false\nurls = ["{receiver.url()}?rto=60"]\n')  # apprise waits 60 s
    receiver.hold = threading.Event()

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        config = write_config(tmp_path / "r.yaml", steps=6, save_steps=2, die_mid_save=4, step_seconds=0.1)
        await engine.start(StartRequest("gpu", config, run_id="r5", workdir=workdir, gpus=0))
        while not ended(workdir, "r5"):
            await asyncio.sleep(0.1)
        states = await engine.refresh()
        assert set(states.values()) == {"failed (exit 137)"}
        # The refresh is back while the service still holds the message (the app polls on).
        await asyncio.to_thread(wait_for, "the POST", lambda: bool(receiver.messages()))
        assert receiver.answered == 0
        receiver.hold.set()
        await engine.close()  # waits for what is under way
        assert receiver.answered == 1 and engine.notices == []

    asyncio.run(go())


# -- R05: claims through a link that drops (a TCP forwarder in front of sshd) -------------
PROXIED = "viaproxy"


@pytest.fixture
def link(hosts: SshHosts, tmp_path: Path, receiver: Receiver,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FaultProxy, Path]]:
    """A forwarder to the gpu sshd, an ssh config whose `viaproxy` goes through it, and a
    config.toml that tells a run's end to `receiver` (the clients only)."""
    proxy = FaultProxy(hosts.ports["gpu"]).start()
    user_line = next(line for line in hosts.ssh_config.read_text().splitlines()
                     if line.strip().startswith("User "))
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {PROXIED}\n  HostName 127.0.0.1\n  Port {proxy.port}\n{user_line}\n"
        f"  IdentityFile {hosts.home / '.ssh' / 'id_test'}\n"
        f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n  ConnectTimeout 2\n"
        + hosts.ssh_config.read_text().replace("Include extra.conf\n", ""))
    toml = tmp_path / "cfg" / "rtrain-tui" / "config.toml"
    toml.parent.mkdir(parents=True)
    toml.write_text(f'[notify]\non_host = false\nurls = ["{receiver.url("SECRETtoken123")}"]\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    yield proxy, config
    proxy.close()


async def failed_run(engine: Engine, tmp_path: Path, workdir: str, run_id: str) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", steps=6, save_steps=2, die_mid_save=4,
                          step_seconds=0.1)
    await engine.start(StartRequest(PROXIED, config, run_id=run_id, workdir=workdir, gpus=0))
    while not ended(workdir, run_id):
        await asyncio.sleep(0.1)


def test_a_claim_whose_answer_a_dropped_link_lost_is_sent_once_all_the_same(
        link: tuple[FaultProxy, Path], tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    """The host made the marker, the link dropped before its answer came back, and the
    connection sent the claim once more: it found its own marker `taken` and nobody sent."""
    proxy, ssh_config = link
    marker = Path(workdir, "cut", "notified", "a1-failed")
    cut = threading.Event()

    def cut_at_the_claim() -> None:
        while not cut.is_set():
            if marker.is_dir():
                proxy.cut()  # the claim is made on the host; its answer is still on its way
                cut.set()
            time.sleep(0.005)

    async def go() -> None:
        engine = Engine(ConnectionPool(ssh_config), RunIndex(tmp_path / "runs.toml"))
        await failed_run(engine, tmp_path, workdir, "cut")
        # A long log tail makes the claim's answer ~44 KB: 2 s through a 20 KB/s link.
        with (Path(workdir) / "cut" / "train.log").open("a") as log:
            log.write("".join(f"filler line {i} of a long log\n" for i in range(2000)))
        proxy.throttle(20_000)
        watcher = threading.Thread(target=cut_at_the_claim, daemon=True)
        watcher.start()
        try:
            assert await engine.refresh() == {(PROXIED, workdir, "cut"): "failed (exit 137)"}
            await engine.notified()
        finally:
            cut.set()
            watcher.join(5)
            proxy.throttle(None)
        assert any(what == "cut" for _, what in proxy.log)
        assert [m["title"] for m in receiver.messages()] == ["rtrain-tui: cut on viaproxy failed (exit 137)"]
        assert engine.notices == []
        await engine.close()

    asyncio.run(go())


def test_a_claim_that_could_not_reach_the_host_is_said_and_sent_by_the_next_refresh(
        link: tuple[FaultProxy, Path], tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    """The refresh saw the end, and the link was gone before its claim went out: the
    message was never sent, by this client or any later look (the index had the end)."""
    proxy, ssh_config = link

    async def go() -> None:
        engine = Engine(ConnectionPool(ssh_config), RunIndex(tmp_path / "runs.toml"))
        await failed_run(engine, tmp_path, workdir, "gone")
        assert await engine.refresh() == {(PROXIED, workdir, "gone"): "failed (exit 137)"}
        proxy.refuse()  # before the claim (sent in the background) leaves
        await engine.notified()
        assert receiver.messages() == []
        said = [n for n in engine.notices if "notification for gone on viaproxy not sent" in n]
        assert len(said) == 1 and "could not reach viaproxy" in said[0], engine.notices
        assert all("SECRET" not in n for n in engine.notices)
        proxy.allow()
        deadline = time.monotonic() + 30
        while not receiver.messages():  # the next refreshes (the app's, `watch`'s) claim it
            assert time.monotonic() < deadline, engine.notices
            await engine.refresh()
            await engine.notified()
            await asyncio.sleep(0.2)
        await engine.refresh()
        await engine.notified()
        assert [m["title"] for m in receiver.messages()] == ["rtrain-tui: gone on viaproxy failed (exit 137)"]
        await engine.close()

    asyncio.run(go())


def test_a_stop_the_trainer_answers_with_exit_1_is_stopped_in_status_and_in_the_clients_message(
        cli: Cli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    """R02: our stop's SIGTERM, answered with exit 1 (torchrun, Lightning) after the
    trainer saved for 3 s, and the stopping client gone before it saw the end (a laptop
    closed mid-stop: `stopped` is never written). The run is `stopped` all the same, and a
    client tells `stopped`, never `failed (exit 1)`."""
    configure(cli, f'[notify]\nurls = ["{receiver.url()}"]\non = ["failed", "stopped"]\n')
    config = write_config(tmp_path / "r9.yaml", steps=600, step_seconds=0.1, term_exit=1, term_seconds=3)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "r9",
            "--no-follow", "--gpus", "0")
    assert r.rc == 0, r.err
    run_dir = Path(workdir) / "r9"
    wait_for("the trainer's first step", lambda: "'step': 1," in (run_dir / "train.log").read_text())
    stop = cli.popen("stop", "gpu", "r9", "--workdir", workdir)
    try:
        wait_for("the stop's TERM", lambda: "SIGTERM received" in (run_dir / "train.log").read_text())
    finally:
        stop.kill()
        stop.communicate(timeout=30)
    wait_for("the trainer's exit", lambda: ended(workdir, "r9"))
    assert (run_dir / "status").read_text().strip() == "1" and not (run_dir / "stopped").exists()
    status = cli("status", "gpu", "r9", "--workdir", workdir)
    assert (status.rc, status.out.strip()) == (0, "stopped"), status.err
    got = receiver.messages()
    assert [m["title"] for m in got] == ["rtrain-tui: r9 on gpu stopped"]
    assert sorted(p.name for p in (run_dir / "notified").iterdir()) == ["a1-stopped"]
