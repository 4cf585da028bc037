"""`rtrain-tui`'s main: parse, serve the commands that read the index alone, else open
the engine and run the command's function under Ctrl-C / SIGTERM handling; every expected
failure one line and an exit code."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.cli.base import NOTHING_STOPPED, Cancelled, err
from rtrain_tui.cli.costs import list_costs
from rtrain_tui.cli.notify import notify_test, say_left_to_clients, sends_from_host
from rtrain_tui.cli.parser import build_parser
from rtrain_tui.cli.registry import COMMANDS, Command
from rtrain_tui.cli.runs import list_runs, reads_index_only
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.runs.index import RunIndex, default_index_path
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transport.sshconfig import default_ssh_config, list_hosts, shown_path

# What only the commands that reach a host need (the engine, the event loop, the SSH
# library, rich's progress bars) is imported inside them: `runs` reads the index alone,
# and those imports were most of its cost (issue 17). A test pins which modules it loads.
if TYPE_CHECKING:
    import asyncio


# Set by `_main` once it knows the command is not the TUI, read by `leave_now`.
_cli_command = False


def leave_now(code: int) -> None:
    """End the process with `code` at once, skipping the interpreter's shutdown.

    A cold command spent 0.15-0.25 s tearing down modules it will never use again. Only
    for a CLI command that returned normally (its index writes done under their lock, its
    connections closed by `asyncio.run`); the TUI and any other caller return as before.
    Returns without exiting when that is not sure: a thread still running (its writes
    could be cut off) or output that cannot be flushed.
    """
    import threading

    if not _cli_command or threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # let the interpreter report it as it always did
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run a command; every expected failure is one line on stderr and exit 1."""
    global _cli_command
    _cli_command = False
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        _cli_command = False  # not a normal end: leave as before
        # `rtrain-tui runs | head -1`: the reader left. Point stdout at /dev/null so the
        # interpreter's final flush cannot raise again, and say it once.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        err("output closed early (broken pipe)")
        return 1
    except RemoteError as exc:
        err(str(exc))
        return 1
    except KeyboardInterrupt:
        _cli_command = False  # not a normal end: leave as before
        err(f"interrupted (Ctrl-C): {NOTHING_STOPPED}")
        return 130
    except _Stopped as stopped:
        _cli_command = False  # not a normal end: leave as before
        term = stopped.sig == signal.SIGTERM
        err(f"{'terminated (SIGTERM)' if term else 'interrupted (Ctrl-C)'}: "
             f"{stopped.line or NOTHING_STOPPED}")
        return 143 if term else 130
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        _cli_command = False  # not a normal end: leave as before
        if os.environ.get("RTRAIN_TUI_DEBUG"):
            raise
        err(_unexpected(exc))
        return 1


def _unexpected(exc: Exception) -> str:
    from asyncssh.config import ConfigParseError

    if isinstance(exc, ConfigParseError):
        return f"bad ssh config: {exc}; fix that line and try again."
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    return (f"unexpected error ({type(exc).__name__}: {exc}); this is a bug, please report it "
            "(RTRAIN_TUI_DEBUG=1 shows the traceback).")


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.ssh_config is not None and not args.ssh_config.is_file():
        # Asked for by name: reading it as "no hosts" would hide the typo.
        err(f"--ssh-config {args.ssh_config}: no such file; give the path of an ssh config.")
        return 1
    ssh_config = args.ssh_config or default_ssh_config()
    problem = _host_problem(args, ssh_config)
    if problem:
        err(problem)
        return 1
    if getattr(args, "gpus", 0) is None and not getattr(args, "gpu_ids", None):
        # The demo host has no GPU, so it defaults to a CPU run, as the start form does.
        # (With --gpu-ids, start counts the ids instead.)
        args.gpus = 0 if _is_demo_host(args) else 1
    index = RunIndex(args.index or default_index_path())
    global _cli_command
    _cli_command = args.command is not None
    if args.command is None:
        from rtrain_tui.tui.app import run_app  # Textual only for the TUI

        return run_app(ssh_config=ssh_config, index=index, demo=args.demo)
    if hasattr(args, "workdir") and args.workdir is None:
        try:
            args.workdir = _recorded_workdir(index, args)
        except RemoteError as exc:
            err(str(exc))
            return 1

    # A config.toml that cannot be used is one line, before anything touches a host.
    hosts = hostconfig.load()
    if reads_index_only(args):
        return list_runs(index, hosts, args)
    if args.command == "costs":
        return list_costs(index, hosts, args)
    if args.command == "notify" and not sends_from_host(hosts, args):
        here = notify_test(hosts, args)
        if args.host is not None and hosts.notify.on_host:
            say_left_to_clients(hosts.notify_urls(args.host), args.host)
        return here
    handler: Command = COMMANDS[args.command]

    import asyncio

    from rtrain_tui.core.engine import Engine
    from rtrain_tui.core.transport.connection import ConnectionPool

    async def serve() -> int:
        engine = Engine(ConnectionPool(ssh_config, on_warning=lambda m: err(f"warning: {m}")),
                        index, hosts)
        demo = None
        try:
            if args.demo:
                from rtrain_tui.demo.server import start_demo_host

                demo = await start_demo_host()
                engine.pool.add(demo.connection())
            return await handler(engine, args)
        finally:
            await engine.close()
            if demo is not None:
                await demo.close()

    async def run() -> int:
        # Watched from the first moment: a signal while the demo host starts was lost.
        # Cleanup (closing the engine) runs inside, where a second signal is ignored.
        with _signals_cancel(asyncio.current_task()) as received:
            try:
                return await serve()
            except asyncio.CancelledError:
                if received:
                    raise _Stopped(received[0]) from None
                raise
            except Cancelled as cancelled:
                raise _Stopped(received[0] if received else signal.SIGINT, cancelled.line) from None

    return asyncio.run(run())


class _Stopped(Exception):
    """Ctrl-C or SIGTERM arrived: the command was cancelled, and it cleaned up.

    `line` says what the cancel did, for the command that was cancelled."""

    def __init__(self, sig: int, line: str = "") -> None:
        self.sig = sig
        self.line = line


@contextlib.contextmanager
def _signals_cancel(task: asyncio.Task[Any] | None) -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM (what `timeout`, CI and service managers send) cancel the
    command, so its cleanup runs: a fetch removes its .part files, an upload its partial
    file on the host. Killed outright by SIGTERM, a fetch left thousands of .part files.
    A second signal is ignored: landing inside the cleanup, Python's KeyboardInterrupt
    cut it short (hundreds of .part files left) or printed a traceback from wherever it
    struck."""
    import asyncio

    received: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        if not received and task is not None:
            task.cancel()
        received.append(sig)

    watched = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            watched.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    try:
        yield received
    finally:
        for sig in watched:
            loop.remove_signal_handler(sig)
        if received:  # exiting: the rest of the cleanup (threads, shutdown) runs undisturbed
            for sig in watched:
                signal.signal(sig, signal.SIG_IGN)


def _is_demo_host(args: argparse.Namespace) -> bool:
    return bool(args.demo) and getattr(args, "host", None) == "demo"


def _host_problem(args: argparse.Namespace, ssh_config: Path) -> str:
    """`demo` without --demo would go to DNS (and maybe somewhere real): say what to add."""
    if getattr(args, "host", None) == "demo" and not args.demo and "demo" not in list_hosts(ssh_config):
        return (f"demo is not in {shown_path(args.ssh_config)}: add --demo for the built-in demo "
                "host (rtrain-tui --demo ...).")
    return ""


def _recorded_workdir(index: RunIndex, args: argparse.Namespace) -> str:
    """`tail/status/fetch/stop HOST RUN` find the run where `start` put it."""
    run_id = getattr(args, "run_id", None)
    if run_id and args.command != "start":
        record = index.get(args.host, run_id)
        if record is not None:
            return record.workdir
    return validate.DEFAULT_WORKDIR
