"""Engine behaviour only visible from inside: host keys, sessions, reconnects, refusals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, LogFollower, LogLines, RunIndex, StartRequest
from rtrain_tui.core.errors import HostKeyChangedError, RemoteError
from tests.conftest import write_config
from tests.sshd import SshHosts


def make_engine(hosts: SshHosts, tmp_path: Path, config: Path | None = None) -> Engine:
    return Engine(ConnectionPool(config or hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))


def test_changed_host_key_is_refused_naming_file_and_line(hosts: SshHosts, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    port = hosts.ports["gpu"]
    # line 2 claims another key for this host: what a reinstalled host or an attacker shows
    known.write_text(
        "# comment\n"
        f"[127.0.0.1]:{port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHb+vY5WLcM6cbkJ4YbXU2p6zq3r8GgS4H1RkZJdS0rA\n"
    )
    cfg = tmp_path / "config"
    cfg.write_text(hosts.ssh_config.read_text().replace(
        str(hosts.home / ".ssh" / "known_hosts"), str(known)).replace("Include extra.conf\n", ""))
    engine = make_engine(hosts, tmp_path, cfg)

    async def go() -> None:
        try:
            await engine.host("gpu").run("echo hi")
        finally:
            await engine.close()

    with pytest.raises(HostKeyChangedError) as err:
        asyncio.run(go())
    assert str(err.value) == (f"cannot reach gpu: its host key changed. If the host was reinstalled, "
                              f"remove line 2 of {known} and try again.")
    report = asyncio.run(make_engine(hosts, tmp_path, cfg).preflight("gpu"))
    assert not report.ok and "host key changed" in report.why_not[0]


def test_twenty_runs_followed_on_one_host_over_one_connection(hosts: SshHosts, tmp_path: Path) -> None:
    """OpenSSH allows 10 sessions per connection; 20 live logs must still stream."""
    engine = make_engine(hosts, tmp_path)
    workdir = str(tmp_path / "work")
    config = write_config(tmp_path / "c.yaml", steps=30, step_seconds=0.05)

    async def go() -> dict[str, list[str]]:
        # On CPU: 20 runs cannot each have the host's one free GPU.
        started = [await engine.start(StartRequest("gpu", config, run_id=f"r{i}", workdir=workdir,
                                                   gpus=0))
                   for i in range(20)]

        async def follow(run_id: str) -> list[str]:
            lines: list[str] = []
            async for ev in LogFollower(engine, "gpu", workdir, run_id).events():
                if isinstance(ev, LogLines):
                    lines += ev.lines
            return lines

        try:
            got = await asyncio.gather(*(follow(s.run_id) for s in started))
        finally:
            await engine.close()
        return dict(zip([s.run_id for s in started], got))

    results = asyncio.run(go())
    for run_id, lines in results.items():
        assert sum("'step'" in line for line in lines) == 30, run_id
        assert lines[-1] == "training done, exit 0"


def test_stream_resumes_after_a_dropped_connection_without_loss_or_repeat(
        hosts: SshHosts, tmp_path: Path) -> None:
    engine = make_engine(hosts, tmp_path)
    workdir = str(tmp_path / "work")
    config = write_config(tmp_path / "c.yaml", steps=60, step_seconds=0.03)

    async def go() -> tuple[list[str], list[str]]:
        await engine.start(StartRequest("gpu", config, run_id="drop", workdir=workdir))
        lines: list[str] = []
        states: list[str] = []
        dropped = False
        async for ev in LogFollower(engine, "gpu", workdir, "drop").events():
            if isinstance(ev, LogLines):
                lines += ev.lines
                if not dropped and len(lines) > 5:
                    dropped = True
                    engine.host("gpu")._conn.abort()  # the Wi-Fi goes away
            else:
                states.append(ev.status)
        await engine.close()
        return lines, states

    lines, states = asyncio.run(go())
    steps = [line for line in lines if "'step'" in line]
    assert len(steps) == 60 and len(set(steps)) == 60
    assert "reconnecting" in states and states[-1] == "ended"


def test_stop_refuses_when_the_pid_file_names_our_own_group(hosts: SshHosts, tmp_path: Path) -> None:
    engine = make_engine(hosts, tmp_path)
    run_dir = tmp_path / "work" / "self"
    run_dir.mkdir(parents=True)

    async def go() -> None:
        try:
            shell_pid = (await engine.host("gpu").run("echo $RT_SHELL")).strip()  # the probe shell
            (run_dir / "train.pid").write_text(shell_pid + "\n")
            await engine.stop("gpu", str(tmp_path / "work"), "self", grace=1)
        finally:
            await engine.close()

    with pytest.raises(RemoteError, match="refused to stop self on gpu"):
        asyncio.run(go())


def test_refresh_probes_each_host_once_for_many_runs(hosts: SshHosts, tmp_path: Path) -> None:
    engine = make_engine(hosts, tmp_path)
    workdir = str(tmp_path / "work")
    from rtrain_tui.core.runs.index import RunRecord
    for i in range(15):
        (Path(workdir) / f"x{i}").mkdir(parents=True)
        (Path(workdir) / f"x{i}" / "status").write_text("0\n")
        engine.index.add(RunRecord(host="gpu" if i % 2 else "cpu", run_id=f"x{i}", workdir=workdir))
    calls: list[str] = []
    for alias in ("gpu", "cpu"):
        conn = engine.host(alias)
        original = conn.run

        async def counted(script: str, timeout: float = 30, _o=original, _a=alias) -> str:
            calls.append(_a)
            return await _o(script, timeout)

        conn.run = counted  # type: ignore[method-assign]

    async def go() -> dict:
        try:
            return await engine.refresh()
        finally:
            await engine.close()

    states = asyncio.run(go())
    assert sorted(calls) == ["cpu", "gpu"]
    assert set(states.values()) == {"completed"} and len(states) == 15


@pytest.mark.serial
def test_a_failed_host_is_retried_with_backoff_not_on_every_call(hosts: SshHosts, tmp_path: Path) -> None:
    """After `silent` times out once, the next caller is answered at once, not in 2 s."""
    import time

    engine = make_engine(hosts, tmp_path)

    async def go() -> tuple[float, str, float]:
        conn = engine.host("silent")
        t0 = time.monotonic()
        with pytest.raises(RemoteError):
            await conn.run("true")
        first = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(RemoteError) as err:
            await conn.run("true")
        await engine.close()
        return first, str(err.value), time.monotonic() - t0

    first, message, second = asyncio.run(go())
    assert first >= 2.0
    assert message.startswith("cannot reach silent: no answer within 2 s (ConnectTimeout) (next try in")
    assert second < first


def test_a_chatty_login_shell_does_not_garble_answers(hosts: SshHosts, tmp_path: Path) -> None:
    """A host whose login shell prints a banner (conda, motd) before `exec sh`."""
    home = hosts.remote_homes["cpu"]
    (home / ".bashrc").write_text('echo "Welcome to the cluster! dir=/wrong"\necho "noise on stderr" >&2\n')
    engine = make_engine(hosts, tmp_path)
    workdir = str(tmp_path / "work")
    config = write_config(tmp_path / "c.yaml", steps=1)

    async def go() -> str:
        try:
            # the first script on the new connection is the one the banner would precede
            run_dir = await engine.run_dir("cpu", workdir, "chatty")
            await engine.start(StartRequest("cpu", config, run_id="chatty", workdir=workdir, gpus=0))
            return run_dir
        finally:
            await engine.close()

    try:
        assert asyncio.run(go()) == f"{workdir}/chatty"
    finally:
        (home / ".bashrc").unlink()
    assert (Path(workdir) / "chatty" / "config.yaml").exists()


def test_calls_cancelled_while_the_shell_starts_leak_no_session(hosts: SshHosts, tmp_path: Path) -> None:
    """Ten calls cancelled while the host's shell is starting, then a normal call: it
    works. (sshd allows 10 sessions per connection; each cancelled start used to keep
    its session open for good, and the host then refused every script.)"""
    gate, bin_dir = tmp_path / "gate", tmp_path / "bin"
    gate.mkdir()
    bin_dir.mkdir()
    # The `sh` the login shell's `exec sh` finds (no arguments; scripts' own `sh -c` pass
    # through): it says it is starting, then waits until the test lets it go on, so each
    # call is cancelled while its shell is starting.
    (bin_dir / "sh").write_text(
        "#!/bin/sh\n"
        f'[ $# = 0 ] && : > {gate}/waiting.$$ && while [ ! -e {gate}/go.$$ ] && [ ! -e {gate}/go ]; '
        "do sleep 0.02; done\n"
        'exec /bin/sh "$@"\n')
    (bin_dir / "sh").chmod(0o755)
    cfg = tmp_path / "config"
    cfg.write_text(hosts.ssh_config.read_text() + hosts.extra_host("gated", bin_dir=bin_dir))
    pool = ConnectionPool(cfg)
    conn = pool.get("gated")

    async def go() -> str:
        seen: set[str] = set()
        try:
            for _ in range(10):
                call = asyncio.create_task(conn.run("echo cancelled"))
                name = await _gated(gate, seen)
                seen.add(name)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                (gate / name.replace("waiting", "go")).touch()  # that start goes on, for nobody
            (gate / "go").touch()
            return await conn.run("echo still-working")
        finally:
            await pool.close()

    assert asyncio.run(go()).strip() == "still-working"


async def _gated(gate: Path, seen: set[str]) -> str:
    """The `waiting.PID` file of the next gated start on the host (a stand-in that waits
    for `go.PID` or `go`), once it is there."""
    deadline = asyncio.get_running_loop().time() + 20
    while not (new := {p.name for p in gate.glob("waiting.*")} - seen):
        assert asyncio.get_running_loop().time() < deadline, "nothing started on the host"
        await asyncio.sleep(0.02)
    [name] = new
    return name


def test_sftp_opens_cancelled_while_the_subsystem_starts_leak_no_session(
        hosts: SshHosts, tmp_path: Path) -> None:
    """As with shells: ten SFTP channels cancelled while the host's sftp-server starts
    (a closed log pane, a timeout), then logs and fetches still get a channel."""
    server = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                               "/usr/lib/sftp-server") if Path(p).exists()), None)
    assert server, "no sftp-server binary: install openssh-server"
    gate = tmp_path / "gate"
    gate.mkdir()
    gated = tmp_path / "gated-sftp-server"
    gated.write_text("#!/bin/sh\n"
                     f": > {gate}/waiting.$$\n"
                     f"while [ ! -e {gate}/go.$$ ] && [ ! -e {gate}/go ]; do sleep 0.02; done\n"
                     f'exec {server} "$@"\n')
    gated.chmod(0o755)
    cfg = tmp_path / "config"
    cfg.write_text(hosts.ssh_config.read_text()
                   + hosts.extra_host("gated-sftp", sftp=f"Subsystem sftp {gated}\n"))
    pool = ConnectionPool(cfg)
    conn = pool.get("gated-sftp")

    async def go() -> bool:
        seen: set[str] = set()
        try:
            for _ in range(10):
                call = asyncio.create_task(conn.sftp())
                name = await _gated(gate, seen)
                seen.add(name)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                (gate / name.replace("waiting", "go")).touch()
            (gate / "go").touch()
            sftp = await conn.sftp()
            return await sftp.isdir("/")
        finally:
            await pool.close()

    assert asyncio.run(go()) is True


class _AnswerHeldBack:
    """A host shell whose answer to the stop's SIGTERM script comes late: the host has run
    it (the signal is delivered) while the client is still waiting for the answer."""

    def __init__(self, conn: object) -> None:
        self._conn = conn
        self.alias = conn.alias  # type: ignore[attr-defined]
        self.term_ran = asyncio.Event()

    async def run(self, script: str, timeout: float = 30.0) -> str:
        out = await self._conn.run(script, timeout)  # type: ignore[attr-defined]
        if "TERM" in script and "result=signalled" in out:
            self.term_ran.set()
            await asyncio.sleep(1.0)  # the answer is on its way
        return out


def test_a_stop_cancelled_while_sigterm_is_answered_still_says_it_was_sent(
        hosts: SshHosts, tmp_path: Path) -> None:
    """Cancelled between the host delivering SIGTERM and its answer arriving: the step
    that says SIGTERM was sent still runs, so the cancelled stop never tells its user that
    no signal went out while the trainer is saving its checkpoint (it raced under load)."""
    from rtrain_tui.core import backends

    engine = make_engine(hosts, tmp_path)
    workdir = str(tmp_path / "work")
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05, ignore_term=True)
    steps: list[str] = []

    async def go() -> None:
        try:
            await engine.start(StartRequest("gpu", config, run_id="r", workdir=workdir, gpus=0))
            shell = _AnswerHeldBack(engine.host("gpu"))
            stop = asyncio.create_task(backends.get("direct").stop_ladder(
                shell, workdir, "r", 60.0, "feedc0de", steps.append))
            await asyncio.wait_for(shell.term_ran.wait(), 20)
            stop.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stop
        finally:
            await engine.stop("gpu", workdir, "r", grace=0)
            await engine.close()

    asyncio.run(go())
    assert steps and steps[0].startswith("SIGTERM sent to the run's "), steps
