"""The demo host: an asyncssh server on 127.0.0.1 that runs commands on this machine.

It exists so a newcomer can preflight, start, watch, fetch from and stop a run within a
minute, with no SSH setup and no GPU. Its host key and the client key are generated on
each start and only ever held in memory, so nothing else can log in. Commands run with
HOME set to a private directory (`$XDG_DATA_HOME/rtrain-tui/demo-host`), and `python3`
there finds a stand-in `praisonai_train` that runs the demo trainer (`trainer.py`).
There is no `nvidia-smi`: the demo host says honestly that it has no GPU.

Runs started on it are detached like any other, so they outlive the app; the next
`--demo` session serves the same directory and finds them again.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from rtrain_tui.core.transport.connection import DirectTarget, HostConnection

DEMO_ALIAS = "demo"
HERE = Path(__file__).parent
SAMPLES = HERE / "samples"


def demo_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "rtrain-tui" / "demo-host"


def _prepare_home(home: Path) -> dict[str, str]:
    """The private HOME and the environment every demo command runs in."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    bin_dir = home / ".demo-bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python3"
    if not python.is_symlink() or os.readlink(python) != sys.executable:
        python.unlink(missing_ok=True)
        python.symlink_to(sys.executable)
    package_root = HERE.parent.parent  # so the stand-in can import rtrain_tui.demo.trainer
    return {
        "HOME": str(home),
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": f"{HERE / 'stand_in'}:{package_root}",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "USER": getpass.getuser(),
        "SHELL": "/bin/sh",
    }


class _Server(asyncssh.SSHServer):
    def __init__(self, client_key: asyncssh.SSHKey) -> None:
        self._client_key = client_key

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return key.public_data == self._client_key.public_data


async def _pump_in(src: asyncssh.SSHReader[bytes], dst: asyncio.StreamWriter) -> None:
    """Client stdin to the shell; the shell reads scripts from it until EOF."""
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncssh.Error):
        pass
    finally:
        dst.close()


async def _pump_out(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
    while data := await src.read(65536):
        try:
            dst.write(data)
            await dst.drain()
        except (OSError, asyncssh.Error):
            return  # nobody is listening any more; the shell ends when its stdin does


@dataclass
class DemoHost:
    """A running demo host; `connection()` is what the engine's pool gets."""

    server: asyncssh.SSHAcceptor
    target: DirectTarget
    home: Path
    sessions: set[asyncio.Task[None]]  # one per open channel: its shell is our child

    def connection(self) -> HostConnection:
        return HostConnection(DEMO_ALIAS, None, direct=self.target)

    async def close(self) -> None:
        """Stop listening and end every session's shell before the event loop closes.

        A shell still running when `asyncio.run` ends is reaped twice (the loop's child
        watcher and the transport's own poll), and asyncio then prints `Unknown child
        process pid …` on stderr. Ending them here, each awaited, leaves nothing to race.
        """
        self.server.close()
        await self.server.wait_closed()
        for task in list(self.sessions):
            task.cancel()
        if self.sessions:
            await asyncio.wait(self.sessions, timeout=5)


async def start_demo_host(home: Path | None = None) -> DemoHost:
    home = home or demo_home()
    env = _prepare_home(home)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    sessions: set[asyncio.Task[None]] = set()

    async def handle(process: asyncssh.SSHServerProcess) -> None:
        task = asyncio.current_task()
        assert task is not None
        sessions.add(task)
        try:
            await _session(process)
        finally:
            sessions.discard(task)

    async def _session(process: asyncssh.SSHServerProcess) -> None:
        # A session of its own: a real host never sees the user's Ctrl-C, and the demo
        # host must not either. In the terminal's process group, a Ctrl-C during a start
        # killed the shell receiving the upload mid-write, and the client reported the
        # broken pipe instead of cancelling cleanly.
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", process.command or "sh", cwd=home, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        try:
            await asyncio.gather(
                _pump_in(process.stdin, proc.stdin),  # type: ignore[arg-type]
                _pump_out(proc.stdout, process.stdout),  # type: ignore[arg-type]
                _pump_out(proc.stderr, process.stderr),  # type: ignore[arg-type]
            )
            status = await proc.wait()
        except (OSError, asyncssh.Error, asyncio.CancelledError):
            status = 255
        finally:
            if proc.returncode is None:
                # The client went away: end its shell (detached runs live on). Not
                # `proc.kill()`: it polls first, and that poll can reap a shell that has
                # just exited before asyncio's child watcher does, which then prints
                # `Unknown child process pid …` on stderr. Our unreaped child cannot be a
                # recycled pid, so signalling it directly is safe.
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # Shielded: a cancel (close(), loop shutdown) must still let the watcher reap it.
            await asyncio.shield(proc.wait())
            # Its pipes too, now: a pipe nobody read to the end (the pumps were cancelled)
            # kept the transport open, and the interpreter closed it after the loop, printing
            # "Exception ignored … Event loop is closed" under the CLI's last line.
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        if not process.is_closing():
            process.exit(status)

    server = await asyncssh.create_server(
        lambda: _Server(client_key), "127.0.0.1", 0,
        server_host_keys=[host_key], process_factory=handle,
        sftp_factory=True, allow_scp=False, encoding=None,
        keepalive_interval=0,
    )
    port = server.sockets[0].getsockname()[1]
    target = DirectTarget("127.0.0.1", port, getpass.getuser(), client_key, host_key)
    return DemoHost(server, target, home, sessions)
