"""The command line: `rtrain-tui preflight|start|tail|status|metrics|fetch|stop|resume|runs|costs`, or the TUI.

Thin over `rtrain_tui.core`: parse, validate, call the engine, print. Every expected
failure is one line on stderr and exit 1 (argparse's usage errors exit 2); Textual is
imported only when the TUI is asked for, so scripted calls start fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui import __version__
from rtrain_tui.core import backends
from rtrain_tui.core.errors import NoSuchPathError, RemoteError
from rtrain_tui.core.metrics import metrics_format
from rtrain_tui.core.runs import hostconfig, probes
from rtrain_tui.core.runs.index import (
    PRUNABLE,
    IndexReport,
    RunIndex,
    default_index_path,
    parse_age,
    parse_time,
    prunable,
)
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.core.transport.sshconfig import default_ssh_config, list_hosts, shown_path

# What only the commands that reach a host need (the engine, the event loop, the SSH
# library, rich's progress bars) is imported inside them: `runs` reads the index alone,
# and those imports were most of its cost (issue 17). A test pins which modules it loads.
if TYPE_CHECKING:
    import asyncio

    from rtrain_tui.core.backends import slurm
    from rtrain_tui.core.engine import Engine, StartTrace


def _add_remote(p: argparse.ArgumentParser, python: bool = True, of_a_run: bool = True) -> None:
    """--workdir (and --python); `of_a_run`: the command names a run, whose recorded
    workdir is the default (`preflight` and `start` have no run yet)."""
    recorded = "the one the run index recorded for this run, else " if of_a_run else ""
    p.add_argument("--workdir", default=None,
                   help=f"run directory parent on the host (default: {recorded}"
                   f"{validate.DEFAULT_WORKDIR})")
    if python:
        p.add_argument("--python", default=validate.DEFAULT_PYTHON,
                       help="python on the host (default: %(default)s)")


HOST_HELP = "an alias from the ssh config (`demo` with --demo)"
RUN_HELP = "the run id `start` printed (`rtrain-tui runs` lists them)"
JSON_HELP = "print JSON instead of text (for scripts)"
GPUS_HELP = "GPUs needed; 0 for a CPU-only run (default: 1; 0 on the demo host)"
DEMO_HELP = "add the built-in demo host `demo` (no GPU box needed)"


def _command_parser() -> argparse.ArgumentParser:
    """Options every command accepts after its name too (`rtrain-tui status demo RUN --demo`).

    SUPPRESS as default: a command that was not given one keeps the value given before
    the command name, instead of resetting it.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--demo", action="store_true", default=argparse.SUPPRESS, help=DEMO_HELP)
    return common


ALL_HOSTS = "\0all"  # `--discover` without a host: not a name anyone can type


def _add_slurm(p: argparse.ArgumentParser, start: bool) -> None:
    """The Slurm flags; each overrides the host's config.toml default."""
    g = p.add_argument_group("Slurm (a login node: --backend slurm, or backend = \"slurm\" in config.toml)")
    g.add_argument("--backend", default=None, choices=backends.BACKENDS,
                   help="how runs are launched (default: the host's config.toml setting, else direct)")
    g.add_argument("--partition", default=None, help="Slurm partition")
    g.add_argument("--gpus-per-node", type=int, default=None, help="default: --gpus")
    if not start:
        return
    g.add_argument("--nodes", type=int, default=None, help="nodes (default 1; >1: srun + torchrun)")
    g.add_argument("--time", default=None, help="time limit, e.g. 30, 4:00:00, 1-12:00:00")
    g.add_argument("--account", default=None, help="Slurm account to charge")
    g.add_argument("--qos", default=None, help="Slurm quality of service")
    g.add_argument("--sbatch-arg", action="append", default=[], metavar="--NAME=VALUE",
                   help="one more sbatch option, e.g. --sbatch-arg=--constraint=a100 (repeatable)")


def _refuse_slurm_flags(args: argparse.Namespace) -> None:
    """Slurm flags for a host that is not a Slurm host would be ignored: say so instead."""
    given = [flag for flag, value in (
        ("--partition", args.partition), ("--gpus-per-node", args.gpus_per_node),
        ("--nodes", getattr(args, "nodes", None)), ("--time", getattr(args, "time", None)),
        ("--account", getattr(args, "account", None)), ("--qos", getattr(args, "qos", None)),
        ("--sbatch-arg", getattr(args, "sbatch_arg", None) or None),
    ) if value is not None]
    if given:
        raise validate.ValidationError(
            f"{', '.join(given)} only apply to Slurm hosts: add --backend slurm, or set "
            f'backend = "slurm" for [hosts.{args.host}] in {hostconfig.default_config_path()}.')


def _slurm_options(engine_hosts: hostconfig.HostConfig, args: argparse.Namespace) -> slurm.SlurmOptions:
    """The host's config.toml defaults with the flags given on top, validated."""
    from rtrain_tui.core.backends import slurm

    base = engine_hosts.for_host(args.host).slurm
    changes = {k: v for k, v in (
        ("partition", args.partition), ("gpus_per_node", args.gpus_per_node),
        ("nodes", getattr(args, "nodes", None)), ("time", getattr(args, "time", None)),
        ("account", getattr(args, "account", None)), ("qos", getattr(args, "qos", None)),
    ) if v is not None}
    if getattr(args, "sbatch_arg", None):
        changes["sbatch_args"] = tuple(args.sbatch_arg)
    return slurm.SlurmOptions(**{**base.__dict__, **changes}).validated()


RAW_HELP = ("print the log's bytes as the trainer wrote them, escape sequences included "
            "(default: terminal control sequences are removed)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rtrain-tui",
        description="Start, watch, fetch from and stop fine-tuning runs on SSH GPU hosts. "
        "With no command: the full-screen app.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--ssh-config", type=Path, default=None,
                        help="ssh config to read hosts from (default: ~/.ssh/config)")
    parser.add_argument("--index", type=Path, default=None,
                        help="run index (default: $XDG_DATA_HOME/rtrain-tui/runs.toml)")
    parser.add_argument("--demo", action="store_true", help=DEMO_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = [_command_parser()]

    p = sub.add_parser("preflight", help="check that a host is ready to train", parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("--gpus", type=int, default=None, help=GPUS_HELP)
    _add_remote(p, of_a_run=False)
    _add_slurm(p, start=False)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("start", help="ship config and dataset, launch the trainer detached",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("-c", "--config", required=True, help="training config (YAML)")
    p.add_argument("-d", "--dataset", default=None, help="dataset file, shipped under its own name")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs needed; 0 for a CPU-only run (default: 1, or as many as --gpu-ids "
                   "names). The least busy free ones are chosen and set as CUDA_VISIBLE_DEVICES")
    p.add_argument("--gpu-ids", default=None, metavar="IDS",
                   help="choose the GPUs by hand, e.g. 0,3 (nvidia-smi's numbers)")
    p.add_argument("--allow-busy", action="store_true",
                   help="take GPUs another process is using rather than refuse")
    p.add_argument("--retries", type=int, default=None, metavar="N",
                   help="when the trainer fails (not by a stop), the host resumes it from its "
                   "newest complete checkpoint, up to N times (default: config.toml's "
                   "`retries`, else 0); a Slurm job of one node retries inside the job")
    p.add_argument("--queue", action="store_true",
                   help="fewer GPUs free than asked: wait for them on the host, in its queue "
                   "(state `queued`), rather than refuse; the host gives them in queue order")
    p.add_argument("--stall-after", default=None, metavar="DURATION",
                   help="a running run whose log has not grown this long is stalled, e.g. 20m "
                   "(default: config.toml's `stall_after`, else 15m; 0: never)")
    p.add_argument("--on-stall", default="warn", choices=("warn", "stop", "restart"),
                   help="what the host does with a stalled run: say so (default), stop it, or "
                   "stop and resume it from its newest complete checkpoint (counts as a retry)")
    p.add_argument("--run-id", default=None, help="default: run-<epoch>")
    _add_remote(p, of_a_run=False)
    p.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True,
                   help="stream the log until the run ends (default: on)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment for the trainer (repeatable)")
    p.add_argument("--raw", action="store_true", help=RAW_HELP)
    p.add_argument("--trainer", default=validate.DEFAULT_TRAINER, metavar="TEMPLATE",
                   help="command template with {python} {dataset} {config} {gpus}, and "
                   "{nodes} {node_rank} {master_addr} {master_port} for Slurm jobs of several "
                   "nodes (default: %(default)s)")
    _add_slurm(p, start=True)

    for name, text in (("tail", "replay and follow a run's log until it ends"),
                       ("status", "print the run's state")):
        p = sub.add_parser(name, help=text, parents=common)
        p.add_argument("host", help=HOST_HELP)
        p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
        _add_remote(p)
        if name == "status":
            p.add_argument("--json", action="store_true", help=JSON_HELP)
        else:
            p.add_argument("--raw", action="store_true", help=RAW_HELP)

    p = sub.add_parser("metrics", help="print a run's loss curve, progress and ETA parsed from its log",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    _add_remote(p, python=False)
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="summary and series as JSON")
    shape.add_argument("--csv", action="store_true",
                       help="one row per step: " + ",".join(metrics_format.COLUMNS))

    p = sub.add_parser("fetch", help="copy a file or directory from the run directory",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    p.add_argument("path", metavar="PATH", help="relative to the run dir, e.g. lora_model")
    p.add_argument("--out", type=Path, default=Path("."), help="local directory (default: .)")
    p.add_argument("--incomplete", action="store_true",
                   help="fetch a checkpoint-N directory even when it was cut off mid-save")
    _add_remote(p, python=False)
    p.add_argument("--python", default=None,
                   help="python on the host, which runs the transfer (default: the one the run "
                   f"index recorded for this run, else {validate.DEFAULT_PYTHON})")

    p = sub.add_parser("stop", help="stop the run's whole process group and verify it is gone",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL (default: %(default)s)")
    _add_remote(p)

    p = sub.add_parser("resume", help="a new attempt of a run that ended failed, stopped or lost, "
                       "in its run directory, from its newest complete checkpoint", parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--from", dest="from_path", default=None, metavar="PATH",
                     help="resume from this complete checkpoint-N directory (relative to the "
                     "run dir, e.g. outputs/checkpoint-150) instead of the newest one")
    how.add_argument("--restart", action="store_true",
                     help="run it again from the start (no checkpoint), in the same directory")
    p.add_argument("--queue", action="store_true",
                   help="GPUs busy: wait for them on the host, in its queue, rather than refuse "
                   "(as start --queue)")
    _add_remote(p, python=False)

    p = sub.add_parser("runs", help="list the runs in the local index", parents=common)
    p.add_argument("--refresh", action="store_true",
                   help="update the runs' states from their hosts (a run that ended, with its "
                   "end time known, is not asked again)")
    p.add_argument("--all", action="store_true", dest="all_runs",
                   help="with --refresh: ask about the ended runs too")
    p.add_argument("--discover", nargs="?", const=ALL_HOSTS, default=None, metavar="HOST",
                   help="first add the runs found on HOST (default: every host in the index) "
                   "that were started elsewhere, e.g. by `praisonai train remote`")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--prune", action="store_true",
                   help="remove old ended runs from the index (never anything on a host), "
                   "saying which first; needs --older-than")
    p.add_argument("--older-than", default=None, metavar="AGE",
                   help="with --prune: runs that ended more than AGE ago (90d, 12w, 36h)")
    p.add_argument("--state", default=None, metavar="STATES",
                   help="with --prune: only these, comma-separated (default: "
                   f"{','.join(PRUNABLE)})")
    p.add_argument("--dry-run", action="store_true", help="with --prune: say what it would remove")

    p = sub.add_parser("watch", help="headless: refresh every host in the index every N "
                       "seconds and send the notifications it sees; Ctrl-C ends it", parents=common)
    p.add_argument("--every", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between refreshes (default: %(default)s)")

    p = sub.add_parser("notify", help="notifications: `notify test [HOST]` sends a test "
                       "message to every URL in config.toml and says which arrived", parents=common)
    p.add_argument("action", choices=("test",),
                   help="`test`: send a test message to every URL and say which arrived")
    p.add_argument("host", nargs="?", default=None, metavar="HOST",
                   help="only the URLs for HOST's runs ([notify] urls and its own notify); "
                   "with [notify] on_host, HOST also sends its webhook URLs the test itself")

    p = sub.add_parser("costs", help="what the runs in the index cost (config.toml's "
                       "price_per_hour / price_per_gpu_hour); asks no host", parents=common)
    p.add_argument("--since", default=None, metavar="AGE",
                   help="only what was spent in the last AGE (7d, 12w, 36h)")
    p.add_argument("--by", default="host", choices=("host", "day", "run"),
                   help="one line per host, per UTC day or per run (default: %(default)s)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _err(message: str) -> None:
    # Messages quote host text (aliases, remote errors): one line, no control sequences.
    print(f"rtrain-tui: {safe_line(message)}", file=sys.stderr)


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
        _err("output closed early (broken pipe)")
        return 1
    except RemoteError as exc:
        _err(str(exc))
        return 1
    except KeyboardInterrupt:
        _cli_command = False  # not a normal end: leave as before
        _err(f"interrupted (Ctrl-C): {NOTHING_STOPPED}")
        return 130
    except _Stopped as stopped:
        _cli_command = False  # not a normal end: leave as before
        term = stopped.sig == signal.SIGTERM
        _err(f"{'terminated (SIGTERM)' if term else 'interrupted (Ctrl-C)'}: "
             f"{stopped.line or NOTHING_STOPPED}")
        return 143 if term else 130
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        _cli_command = False  # not a normal end: leave as before
        if os.environ.get("RTRAIN_TUI_DEBUG"):
            raise
        _err(_unexpected(exc))
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
        _err(f"--ssh-config {args.ssh_config}: no such file; give the path of an ssh config.")
        return 1
    ssh_config = args.ssh_config or default_ssh_config()
    problem = _host_problem(args, ssh_config)
    if problem:
        _err(problem)
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
            _err(str(exc))
            return 1

    # A config.toml that cannot be used is one line, before anything touches a host.
    hosts = hostconfig.load()
    if _reads_index_only(args):
        return list_runs(index, hosts, args)
    if args.command == "costs":
        return list_costs(index, hosts, args)
    if args.command == "notify" and not _sends_from_host(hosts, args):
        here = notify_test(hosts, args)
        if args.host is not None and hosts.notify.on_host:
            _say_left_to_clients(hosts.notify_urls(args.host), args.host)
        return here
    handler: Callable[[Engine, argparse.Namespace], Awaitable[int]] = COMMANDS[args.command]

    import asyncio

    from rtrain_tui.core.engine import Engine
    from rtrain_tui.core.transport.connection import ConnectionPool

    async def serve() -> int:
        engine = Engine(ConnectionPool(ssh_config, on_warning=lambda m: _err(f"warning: {m}")),
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
            except _Cancelled as cancelled:
                raise _Stopped(received[0] if received else signal.SIGINT, cancelled.line) from None

    return asyncio.run(run())


NOTHING_STOPPED = "nothing on the host was stopped; a run keeps going."


class _Stopped(Exception):
    """Ctrl-C or SIGTERM arrived: the command was cancelled, and it cleaned up.

    `line` says what the cancel did, for the command that was cancelled."""

    def __init__(self, sig: int, line: str = "") -> None:
        self.sig = sig
        self.line = line


class _Cancelled(Exception):
    """Raised by a command whose work was cancelled, with the line that says what it did
    (the run left behind, the files kept); `run` turns it into `_Stopped`."""

    def __init__(self, line: str) -> None:
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


def _demo_needs_flag(args: argparse.Namespace) -> bool:
    """The built-in demo host is not served (no --demo) and no ssh config host is `demo`."""
    return not args.demo and "demo" not in list_hosts(args.ssh_config or default_ssh_config())


def _recorded_workdir(index: RunIndex, args: argparse.Namespace) -> str:
    """`tail/status/fetch/stop HOST RUN` find the run where `start` put it."""
    run_id = getattr(args, "run_id", None)
    if run_id and args.command != "start":
        record = index.get(args.host, run_id)
        if record is not None:
            return record.workdir
    return validate.DEFAULT_WORKDIR


# -- commands -------------------------------------------------------------------
async def cmd_preflight(engine: Engine, args: argparse.Namespace) -> int:
    backend = args.backend or engine.backend_of_host(args.host)
    if backend != "slurm":
        _refuse_slurm_flags(args)
    options = _slurm_options(engine.hosts, args) if backend == "slurm" else None
    report = await engine.preflight(args.host, args.gpus, args.python, args.workdir,
                                    backend=backend, options=options)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    if not report.reachable:
        _err(report.error)
        return 1
    marks = {True: "✓", False: "✗"}
    for c in report.checks:
        mark = "!" if c.warning and not c.ok else marks[c.ok]
        print(f"  {mark} {c.name:8} {c.detail}")
    for g in report.gpus:
        print(f"    GPU {g.index}: {g.name}  {g.shown('memory_used_mib')}/"
              f"{g.shown('memory_total_mib')} MiB  {g.shown('utilization_pct')}% busy")
    for job in report.jobs:
        print(f"    job {job.replace('|', '  ').strip()}")
    if report.ok:
        print(f"{args.host} is ready")
        return 0
    _err(f"{args.host} is not ready: " + "; ".join(report.why_not))
    return 1


def _program() -> str:
    """This program as a command the user's shell runs again: `rtrain-tui` when that name
    on PATH is this installation, else the way it was invoked (`/path/python -m
    rtrain_tui`, or the script's full path), so a printed hint works as printed."""
    python = Path(sys.executable)
    on_path = shutil.which("rtrain-tui")
    if on_path:
        try:
            with open(on_path, "rb") as script:
                shebang = script.readline(4096)
        except OSError:
            shebang = b""
        # A console script runs the interpreter its shebang names: this installation's
        # when that interpreter sits beside ours (a venv links python, python3, python3.11).
        if shebang.startswith(b"#!") and Path(os.fsdecode(shebang[2:].strip())).parent == python.parent:
            return "rtrain-tui"
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0 or Path(argv0).name == "__main__.py":  # `python -m rtrain_tui`
        return f"{shlex.quote(str(python))} -m rtrain_tui"
    return shlex.quote(os.path.abspath(argv0))


def _hint(args: argparse.Namespace, command: str, run_id: str, *more: str) -> str:
    """A command that finds this run again (`tail`, `stop`, `status`), ready to paste:
    the program as it can be run, and the options this call was given that it needs;
    `more`: the command's own words after the run id (a fetch's path)."""
    words = []  # the program's own options go before the command
    if args.ssh_config is not None:
        words += ["--ssh-config", str(args.ssh_config)]
    if args.index is not None:
        words += ["--index", str(args.index)]
    words += [command, args.host, run_id, *more]
    if args.workdir != validate.DEFAULT_WORKDIR:
        words += ["--workdir", args.workdir]
    if args.demo:
        words.append("--demo")
    # Quoted: a `~` in --workdir must reach the host, not be expanded by the local shell.
    return f"{_program()} {shlex.join(words)}"


async def cmd_start(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    from rtrain_tui.core.engine import StartRequest, StartTrace
    from rtrain_tui.progress_view import TerminalProgress

    gpu_ids = validate.parse_gpu_ids(args.gpu_ids) if args.gpu_ids is not None else ()
    gpus = args.gpus if args.gpus is not None else (len(gpu_ids) if gpu_ids else 1)
    if (args.backend or engine.backend_of_host(args.host)) != "slurm":
        _refuse_slurm_flags(args)
    request = StartRequest(
        host=args.host, config=Path(args.config),
        dataset=Path(args.dataset) if args.dataset else None, gpus=gpus,
        run_id=args.run_id, python=args.python, workdir=args.workdir,
        env=validate.parse_env(args.env), trainer=args.trainer,
        gpu_ids=gpu_ids, allow_busy=args.allow_busy, queue=args.queue,
        backend=args.backend, retries=args.retries, on_stall=args.on_stall,
        stall_after_s=validate.parse_duration(args.stall_after, "--stall-after")
        if args.stall_after is not None else None,
        options=_slurm_options(engine.hosts, args)
        if (args.backend or engine.backend_of_host(args.host)) == "slurm" else None,
    ).validated()
    def created(run_id: str, run_dir: str) -> None:
        # Said before anything that can fail after the run dir exists: a client killed
        # from here on still leaves the user the id to look for (and the index has it).
        _err(f"run {run_id} created on {args.host} ({run_dir})")

    trace = StartTrace()
    try:
        with TerminalProgress() as progress:
            started = await engine.start(request, progress=progress.update, on_created=created,
                                         trace=trace)
    except asyncio.CancelledError:
        raise _Cancelled(_start_cancelled(args, trace)) from None
    if started.record.gpu_ids:
        # stderr: scripts parse the lines below, which stay as they were.
        _err(f"{started.run_id} gets GPU(s) {started.record.gpu_ids} on {args.host} "
             "(CUDA_VISIBLE_DEVICES)")
    if started.submit_message:
        _err(f"{args.host} said: {started.submit_message}")  # the cluster's notice, on stderr
    if started.record.state == "queued" and not started.job_id:
        want = f"GPU(s) {args.gpu_ids}" if args.gpu_ids else f"{gpus} free GPU(s)"
        _err(f"{started.run_id} is queued on {args.host}: it waits there for {want}, "
             "in the order runs were queued (it holds with this client closed)")
    if started.dataset:
        _err(started.dataset)  # the progress line is gone: how the bytes went, on stderr
    job = f" (Slurm job {started.job_id})" if started.job_id else ""
    print(f"started {started.run_id} on {args.host}{job}")
    print(f"  tail: {_hint(args, 'tail', started.run_id)}")
    print(f"  stop: {_hint(args, 'stop', started.run_id)}", flush=True)
    if started.unrecorded:
        # Exit 0 all the same: the trainer runs, and a script that retried on an error
        # would start a second one.
        _err(f"warning: {started.run_id} is running on {args.host}, but the run index could "
             f"not record it ({started.unrecorded}); the next `{_program()} runs --refresh` "
             "(or the app's refresh) records it.")
    if not args.follow:
        return 0
    return await _follow(engine, args.host, args.workdir, started.run_id, raw=args.raw,
                         args=args)


def _start_cancelled(args: argparse.Namespace, trace: StartTrace) -> str:
    """What a cancelled start left on the host, and what to do about it."""
    from rtrain_tui.core.engine import CREATED, LAUNCHED, LAUNCHING, LEFT

    said, run = f"start cancelled; {trace.left(args.host)}", trace.run_id
    if trace.stage in (CREATED, LEFT):
        return f"{said} (`{_program()} runs --refresh`)."
    if trace.stage == LAUNCHING:
        return (f"{said}; `{_hint(args, 'status', run)}` tells, "
                f"`{_hint(args, 'stop', run)}` stops it.")
    if trace.stage == LAUNCHED:
        return f"detached: {trace.left(args.host)}; `{_hint(args, 'stop', run)}` stops it."
    return f"{said}."


async def _follow(engine: Engine, host: str, workdir: str, run_id: str, raw: bool = False,
                  args: argparse.Namespace | None = None) -> int:
    """Print the log until the run ends; exit 0 only when it completed.

    Cancelled (Ctrl-C, SIGTERM), it detaches: the line says the run goes on.

    An outage is waited out (the run keeps going on the host). A permanent failure
    (host key changed, auth refused, no such host) ends the stream by raising a
    RemoteError, which `main` prints as one line before exiting 1.
    """
    from rtrain_tui.core.logs.logstream import LogFollower, LogLines
    from rtrain_tui.log_view import LogWriter

    # A host never reached in 30 s (a dead port, a down box) is given up on; one that
    # answered once is waited for as long as the outage lasts.
    follower = LogFollower(engine, host, workdir, run_id, give_up_after=30.0)
    final = probes.UNKNOWN
    lost = False
    log = LogWriter(raw=raw)

    def say(message: str) -> None:
        log.interrupt()  # the message takes the bar's line; the next write redraws the bar
        _err(message)

    try:
        async for event in _detaching(follower.events(), host, run_id, args):
            if isinstance(event, LogLines):
                log.write(event.lines)
            elif event.status == "reconnecting":
                lost = True
                say(f"lost {host} ({event.detail}); reconnecting, the run keeps going…")
            elif event.status == "live" and lost:
                lost = False
                say(f"reconnected to {host}; following again")
            elif event.status == "queued":
                why = f" ({event.detail})" if event.detail else ""
                say(f"{run_id} is queued on {host}{why}; waiting for it to start…")
            elif event.status == "started":
                say(f"{run_id} left the queue on {host}: {event.run_state}")
            elif event.status == "ended":
                final = event.run_state
    finally:
        log.close()  # an error or Ctrl-C too: what follows starts on a line of its own
    await engine.observed(host, workdir, run_id, final)  # a notification, once, if its end is one
    for notice in engine.notices:
        _err(notice)
    print(f"{run_id} on {host}: {final}")
    return 0 if final == probes.COMPLETED else 1


async def _detaching(events: AsyncIterator[Any], host: str, run_id: str,
                     args: argparse.Namespace | None) -> AsyncIterator[Any]:
    """`events`, and a cancel turned into the line that says following stopped, not the run."""
    import asyncio

    try:
        async for event in events:
            yield event
    except asyncio.CancelledError:
        again = f"; `{_hint(args, 'tail', run_id)}` follows it again" if args is not None else ""
        raise _Cancelled(f"detached from {run_id} on {host}: nothing was stopped, the run "
                         f"keeps going{again}.") from None


async def cmd_tail(engine: Engine, args: argparse.Namespace) -> int:
    await engine.require_run(args.host, args.workdir, args.run_id)
    return await _follow(engine, args.host, args.workdir, args.run_id, raw=args.raw, args=args)


async def cmd_status(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core import host_view

    probe = await engine.require_run(args.host, args.workdir, args.run_id)
    await engine.observed(args.host, args.workdir, args.run_id, probe.state, probe)
    for notice in engine.notices:  # a notification that could not be sent
        _err(notice)
    # Worded as the runs table words it (core.host_view): the same state word, and the
    # same reason the row and the end-of-run toast show (one function).
    line = await host_view.run_line(engine, args.host, args.workdir, args.run_id, probe)
    if args.json:
        from rtrain_tui.core import resume

        # When an ended run ended, by the host's clock (its status file): attempts.jsonl
        # has it only for attempts that a later one followed.
        ended = probe.ended_at
        if ended is None and probes.is_final(line.state):
            ended = (await engine.probe_many(args.host, [(args.workdir, args.run_id)], [0]))[0].ended_at
        attempts = resume.attempts_view(
            await engine.attempts(args.host, args.workdir, args.run_id),
            line.state, probe.exit_code, line.reason, ended if probes.is_final(line.state) else None)
        print(json.dumps({
            "host": args.host, "run_id": args.run_id, "workdir": args.workdir,
            "state": line.state, "pid": probe.pid, "exit_code": probe.exit_code,
            "exists": probe.exists, "stop_requested": probe.stop_requested,
            "reason": line.reason, "queue_position": line.queue_place,
            "slurm_job_id": probe.job_id or None, "slurm_state": probe.scheduler_state or None,
            "attempt": attempts[-1]["attempt"], "attempts": attempts,
            "stalled_for": probe.stalled_for, "gpus_idle_for": probe.gpus_idle_for,
            **await _status_cost(engine, args, ended, line.state, attempts),
        }, indent=2))
        return 0
    # Exactly one status word on stdout: scripts parse it. Why goes beside it, on stderr.
    print(line.state, flush=True)
    if line.reason:
        _err(f"{args.run_id} on {args.host}: {line.reason}")
    return 0


async def _status_cost(engine: Engine, args: argparse.Namespace, ended: int | None,
                       state: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """`cost` (so far) and `cost_at_end` (a running run's, from its ETA) for `status --json`:
    null on a host with no price in config.toml (which then costs no extra round trip)."""
    from dataclasses import replace

    from rtrain_tui.core.metrics.metrics_sync import sync_metrics
    from rtrain_tui.core.runs import cost
    from rtrain_tui.core.runs.index import RunRecord

    price = engine.hosts.for_host(args.host).price
    if price is None:
        return {"cost": None, "cost_at_end": None, "currency": None}
    record = engine.index.get(args.host, args.run_id) or RunRecord(args.host, args.run_id, args.workdir)
    if probes.is_final(state) and ended is not None:  # the host's clock, as a refresh records it
        record = replace(record, ended_at=datetime.fromtimestamp(ended, UTC).isoformat())
    eta = None
    if state == probes.RUNNING:
        eta = (await sync_metrics(engine, args.host, args.workdir, args.run_id)).summary().eta_seconds
    got = cost.run_cost(record, price, datetime.now(UTC), attempts, state, eta)
    assert got is not None
    # At its end: the projection of a running run with an ETA; what an ended run cost.
    at_end = got.at_end if got.at_end is not None else got.spent if probes.is_final(state) else None
    return {"cost": float(got.spent), "cost_at_end": None if at_end is None else float(at_end),
            "currency": got.currency}


async def cmd_metrics(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core.metrics.metrics_sync import sync_metrics

    parser = await sync_metrics(engine, args.host, args.workdir, args.run_id)
    # Its state decides whether the ETA and steps/s are live (metrics_format.for_state).
    state = (await engine.probe(args.host, args.workdir, args.run_id)).state
    if args.json:
        print(json.dumps({"host": args.host, "run_id": args.run_id, "state": state,
                          **metrics_format.to_json(parser, state)}, indent=2))
        return 0
    rows = metrics_format.rows(parser)
    if args.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(metrics_format.COLUMNS)
        writer.writerows([[step, *("" if v is None else repr(v) for v in values)]
                          for step, *values in rows])
        return 0
    print(metrics_format.summary_line(metrics_format.for_state(parser.summary(), state))
          or f"no metrics in the log of {args.run_id} yet")
    if rows:
        table = [("STEP", "LOSS", "EVAL_LOSS", "LR", "GRAD_NORM")] + [
            (str(step), *(metrics_format.number(v) for v in values)) for step, *values in rows]
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        for r in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    return 0


async def cmd_fetch(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    from rtrain_tui.progress_view import TerminalProgress

    # Engine.fetch validates the path, run id and workdir before it connects.
    rel = validate.check_fetch_path(args.path)  # a bad path is said before the host is asked
    if args.python is not None:  # so is a bad interpreter (a checkpoint's check connects)
        validate.check_python(args.python)
    checkpoint = _checkpoint_step(rel) is not None
    if checkpoint:  # an incomplete one is refused before any of it is fetched
        await engine.require_run(args.host, args.workdir, args.run_id)
        await _check_checkpoint(engine, args, rel)
    warnings: list[str] = []
    landed: list[Path] = []
    try:
        with TerminalProgress() as progress:
            dest = await engine.fetch(args.host, args.workdir, args.run_id, args.path, args.out,
                                      progress.update, on_warning=warnings.append,
                                      on_landed=landed.append, python=args.python)
    except RemoteError as exc:
        # Whether the run exists is asked only now: a fetch that works needs no probe
        # (one round trip less before the first byte), and a run that is not there
        # fails the fetch's listing, which is then said in the run's words. Input that
        # was refused asked no host, and is said as it is.
        if not checkpoint and not isinstance(exc, validate.ValidationError):
            await engine.require_run(args.host, args.workdir, args.run_id)
        if isinstance(exc, NoSuchPathError) and rel.split("/")[0] == ADAPTER_DIR:
            raise NoSuchPathError(f"{exc}{await _newest_checkpoint_hint(engine, args, rel)}") from None
        raise
    except asyncio.CancelledError:
        # By now every partial file is removed (the fetch's cleanup ran before this).
        where = args.out / (Path(args.path).name if args.path != "." else args.run_id)
        kept = (f"{len(landed)} file(s) had landed whole in {where} and are kept (each "
                "verified)" if landed else "nothing was fetched")
        raise _Cancelled(f"fetch cancelled; {kept}; every partial file was removed.") from None
    for warning in warnings:  # after the progress line is gone; names already made inert
        print(f"rtrain-tui: warning: {warning}", file=sys.stderr)
    print(f"fetched to {dest}")
    return 0


ADAPTER_DIR = "lora_model"  # where the trainer saves the adapter when training completes


async def _newest_checkpoint_hint(engine: Engine, args: argparse.Namespace, rel: str) -> str:
    """For an adapter the run does not have (it stopped or failed before its end): its
    newest complete checkpoint, and the fetch that brings it ("" when none)."""
    from rtrain_tui.core.runs import checkpoints

    try:
        newest = checkpoints.newest_complete(
            await engine.checkpoints(args.host, args.workdir, args.run_id)).checkpoint
    except RemoteError:
        return ""  # the path's own error says enough
    if newest is None or newest.path == rel:
        return ""
    out = ["--out", str(args.out)] if args.out != Path(".") else []
    return (f" The run's newest complete checkpoint is {newest.path}: "
            f"`{_hint(args, 'fetch', args.run_id, newest.path, *out)}` fetches it.")


def _checkpoint_step(rel: str) -> int | None:
    """The N of a `checkpoint-N` path, else None (checkpoints.step_of, imported when used)."""
    from rtrain_tui.core.runs import checkpoints

    return checkpoints.step_of(rel)


async def _check_checkpoint(engine: Engine, args: argparse.Namespace, rel: str) -> None:
    """An incomplete `checkpoint-N` (cut off mid-save) is fetched only with --incomplete."""
    from rtrain_tui.core.runs import checkpoints

    note = checkpoints.incomplete_note(
        await engine.checkpoints(args.host, args.workdir, args.run_id), rel)
    if note and not args.incomplete:
        raise RemoteError(f"{note}. `--incomplete` fetches it anyway.")
    if note:
        print(f"rtrain-tui: warning: {note}; fetching it as asked (--incomplete).", file=sys.stderr)


async def cmd_stop(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    signalled: list[str] = []

    def step(message: str) -> None:
        if "sent" in message or "cancelled" in message:
            signalled.append(message)
        if sys.stderr.isatty():
            print(f"  {message}", file=sys.stderr)

    validate.check_grace(args.grace)  # a bad grace is said before the host is asked
    await engine.require_run(args.host, args.workdir, args.run_id)
    try:
        print(await engine.stop(args.host, args.workdir, args.run_id, args.grace, step))
    except asyncio.CancelledError:
        raise _Cancelled(await _stop_cancelled(engine, args, signalled)) from None
    return 0


async def cmd_resume(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core import host_view, resume

    resume.check_request(args.from_path, args.restart)  # before connecting: user input

    def step(message: str) -> None:
        if sys.stderr.isatty():
            print(f"  {message}", file=sys.stderr)

    # Why the attempt before ended, worded as `status` words it: attempts.jsonl keeps it.
    probe = await engine.require_run(args.host, args.workdir, args.run_id)
    line = await host_view.run_line(engine, args.host, args.workdir, args.run_id, probe)
    resumed = await engine.resume(args.host, args.workdir, args.run_id, from_path=args.from_path,
                                  restart=args.restart, on_step=step, reason=line.reason,
                                  queue=args.queue)
    for skipped in resumed.skipped:
        _err(f"skipped {skipped}")
    started = resumed.started
    if started.record.gpu_ids:
        _err(f"{started.run_id} gets GPU(s) {started.record.gpu_ids} on {args.host}")
    if started.submit_message:
        _err(f"{args.host} said: {started.submit_message}")
    if started.record.state == probes.QUEUED and not started.job_id:
        _err(f"{started.run_id} is queued on {args.host}: it waits there for free GPUs, in the "
             "order runs were queued (it holds with this client closed)")
    how = f"from {resumed.checkpoint}" if resumed.checkpoint else "from the start"
    job = f" (Slurm job {started.job_id})" if started.job_id else ""
    print(f"resumed {started.run_id} on {args.host}: attempt {resumed.attempt}, {how}{job}")
    print(f"  tail: {_hint(args, 'tail', started.run_id)}")
    print(f"  stop: {_hint(args, 'stop', started.run_id)}", flush=True)
    if started.unrecorded:
        _err(f"warning: {started.run_id} is running on {args.host}, but the run index could "
             f"not record it ({started.unrecorded}); the next `{_program()} runs --refresh` "
             "records it.")
    return 0


async def _stop_cancelled(engine: Engine, args: argparse.Namespace, signalled: list[str]) -> str:
    """Did the run stop? Asked of the host once more (bounded), and said as it answers."""
    from rtrain_tui.core.transport.bounded import bounded

    sent = f"stop cancelled after {signalled[-1]}" if signalled else \
        "stop cancelled before any signal was sent"
    try:
        state = (await bounded(engine.probe(args.host, args.workdir, args.run_id), 10.0)).state
    except (RemoteError, TimeoutError):
        return f"{sent}; {args.run_id} on {args.host} could not be asked how it is: " \
               f"`{_hint(args, 'status', args.run_id)}` tells."
    if state in (probes.RUNNING, probes.QUEUED, probes.STARTING):
        more = " (it may still be saving a checkpoint)" if signalled else ""
        return (f"{sent}; {args.run_id} is still {state} on {args.host}{more}; "
                f"`{_hint(args, 'stop', args.run_id)}` stops it.")
    return f"{sent}; {args.run_id} on {args.host} is no longer running: {state}."


async def _discover(engine: Engine, host: str, args: argparse.Namespace) -> int:
    """Add the runs found on one host or all; 1 when there is no host to look at.

    A named host that cannot be reached is an error (raised); with every host, one that
    is down is a warning, so the others' runs still come in.
    """
    if host == ALL_HOSTS:
        hosts = sorted({r.host for r in engine.index.load()})
        if not hosts:
            _err("no hosts in the run index yet; name one: rtrain-tui runs --discover HOST")
            return 1
        if "demo" in hosts and _demo_needs_flag(args):
            hosts.remove("demo")  # as with --refresh: not served, so not looked at
            _err("the demo host was not looked at: add --demo (rtrain-tui --demo runs --discover).")
    else:
        hosts = [host]  # the engine checks the name before it connects
    for name in hosts:
        try:
            added = await engine.discover(name)
        except RemoteError as exc:
            if host != ALL_HOSTS:
                raise
            _err(f"warning: {exc}")  # one host down does not hide the others' runs
            continue
        ids = ", ".join(r.run_id for r in added)
        _err(f"{name}: found {len(added)} run{'' if len(added) == 1 else 's'} started elsewhere"
             + (f": {ids}" if ids else ""))
    return 0


_NEVER = datetime.min.replace(tzinfo=UTC)


def _json_rows(rows: list[dict[str, str | bool | float | None]]) -> str:
    """`json.dumps(rows, indent=2)`, byte for byte, through the C encoder: with `indent`
    json takes its Python one, ~40 µs a run (0.4 s for 10,000). The values are scalars,
    so the item separator only ever falls between two fields. One encoder for all rows:
    `json.dumps` with separators builds a new one per call (a third of the time)."""
    if not rows:
        return "[]"
    encode = json.JSONEncoder(separators=(",\n    ", ": ")).encode
    return "[\n" + ",\n".join("  {\n    " + encode(row)[1:-1] + "\n  }" for row in rows) + "\n]"


def _prune(index: RunIndex, args: argparse.Namespace) -> int:
    """`runs --prune`: list the runs it will forget, then forget exactly those."""
    if args.older_than is None:
        raise validate.ValidationError("--prune needs --older-than, e.g. --older-than 90d.")
    if args.refresh or args.discover is not None or args.json or args.all_runs:
        raise validate.ValidationError("--prune goes alone: not with --refresh, --all, --discover or --json.")
    states = [s.strip() for s in (args.state or ",".join(PRUNABLE)).split(",") if s.strip()]
    age = parse_age(args.older_than)
    report = index.load_report()
    for problem in report.problems:
        _err(f"warning: {problem}")
    listed = prunable(report.records, age, states)
    what = f"{'/'.join(states)} runs that ended more than {args.older_than.strip()} ago"
    if not listed:
        print(f"nothing to prune: no {what}.")
        return 0
    n = f"{len(listed)} run{'' if len(listed) == 1 else 's'}"
    print(f"{'would remove' if args.dry_run else 'removing'} {n} from the index "
          f"({what}; nothing on any host is touched):")
    rows = [("HOST", "RUN", "STATE", "ENDED")] + [
        (r.host, r.run_id, r.state, _to_the_second(r.ended_at or r.updated_at or r.started_at))
        for r in listed]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if args.dry_run:
        print("dry run: nothing was removed.")
        return 0
    removed = index.remove_records(listed)
    kept = len(listed) - len(removed)
    print(f"removed {len(removed)} run{'' if len(removed) == 1 else 's'} from {index.path}"
          + (f"; {kept} changed since they were listed and were kept." if kept else "."))
    return 0


def _reads_index_only(args: argparse.Namespace) -> bool:
    """`runs` without --refresh or --discover asks no host: it needs no engine, no event
    loop and no SSH library, so `_main` serves it with `list_runs` alone."""
    return args.command == "runs" and not args.refresh and args.discover is None


def list_runs(index: RunIndex, hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`runs` (or `runs --prune`) from the local index alone."""
    if args.prune:
        return _prune(index, args)
    _refuse_prune_flags(args)
    return _print_runs(index, hosts, _runs_report(index), args)


def _refuse_prune_flags(args: argparse.Namespace) -> None:
    if args.older_than is not None or args.state is not None or args.dry_run:
        raise validate.ValidationError("--older-than, --state and --dry-run go with --prune.")
    if args.all_runs and not args.refresh:
        raise validate.ValidationError("--all goes with --refresh: rtrain-tui runs --refresh --all.")


def _runs_report(index: RunIndex) -> IndexReport:
    report = index.load_report()
    for problem in report.problems:  # every mode: `--json` keeps stdout for the runs alone
        _err(f"warning: {problem}")
    return report


async def cmd_runs(engine: Engine, args: argparse.Namespace) -> int:
    """`runs --refresh` / `--discover`: ask the hosts, then list as `list_runs` does."""
    from rtrain_tui.core import host_view

    if args.prune:
        return _prune(engine.index, args)  # which says it goes alone
    _refuse_prune_flags(args)
    if args.discover is not None:
        code = await _discover(engine, args.discover, args)
        if code:
            return code
    report = _runs_report(engine.index)
    if args.refresh:
        records = report.records
        if _demo_needs_flag(args):
            # Without --demo the demo host is not served: probing it would go to DNS and
            # mark every demo run stale. Say what to add instead.
            records = [r for r in records if r.host != "demo"]
            left = len(report.records) - len(records)
            if left:
                _err(f"{left} run{'' if left == 1 else 's'} on the demo host not refreshed: "
                     "add --demo (rtrain-tui --demo runs --refresh).")
        # The app's refresh, without the progress column this table does not have.
        # The workdirs' listing rides with each host's probe: an ended run resumed from
        # another laptop, or retried by its host, is probed again (no extra round trip
        # when none did).
        await host_view.refresh(engine, records, words=False, all_runs=args.all_runs,
                                went_on=not args.all_runs)
        await engine.notified()  # what it sends, so that a failure is said here
        for line in engine.notices:  # e.g. a run lost to a reboot, resumed
            _err(line)
        report = engine.index.load_report()
    return _print_runs(engine.index, engine.hosts, report, args)


def _print_runs(index: RunIndex, hosts: hostconfig.HostConfig, report: IndexReport,
                args: argparse.Namespace) -> int:
    # Oldest first, as they were started: the index keeps ended runs in monthly
    # archives, so its file order no longer is that (a run with no start time leads).
    runs = sorted(report.records, key=lambda r: parse_time(r.started_at) or _NEVER)
    costs = _index_costs(hosts, runs)
    if args.json:
        print(_json_rows([
            {"host": r.host, "run_id": r.run_id, "state": r.state, "stale": r.stale,
             "started_at": r.started_at, "updated_at": r.updated_at, "ended_at": r.ended_at,
             "workdir": r.workdir, "origin": r.origin or "started", "gpu_ids": r.gpu_ids,
             "backend": hosts.backend_of(r), "slurm_job_id": r.job_id or None,
             "cost": float(c.spent) if c is not None else None,
             "currency": c.currency if c is not None else None}
            for r, c in zip(runs, costs, strict=True)
        ]))
        return 0
    if not runs and report.problems:
        _err(f"no usable runs: the index holds {len(report.problems)} that were skipped (above); "
             f"fix or remove them in {index.path}.")
        return 0
    if not runs:
        print("no runs yet; start one with: rtrain-tui start HOST -c CONFIG -d DATASET "
              "(or find those started elsewhere: rtrain-tui runs --discover HOST)")
        return 0
    rows: list[tuple[str, ...]] = [("HOST", "RUN", "STATE", "STARTED")]
    rows += [(r.host, r.run_id, r.state + (" (stale)" if r.stale else "")
              + (" (found)" if r.origin == "found" else ""), _to_the_second(r.started_at)) for r in runs]
    if any(c is not None for c in costs):  # a COST column once some host has a price
        rows = [(*rows[0], "COST")] + [(*row, c.text() if c is not None else "-")
                                       for row, c in zip(rows[1:], costs, strict=True)]
    # One format string and one write, not a join per row and a print per run (10,000).
    line = "  ".join(f"{{:<{max(map(len, column))}}}" for column in zip(*rows))
    print("\n".join(line.format(*row).rstrip() for row in rows))
    return 0


def _to_the_second(when: str) -> str:
    """An index time for people: the index keeps microseconds (they order its events)."""
    parsed = parse_time(when)
    return parsed.replace(microsecond=0).isoformat() if parsed is not None else when


def _index_costs(hosts: hostconfig.HostConfig, runs: list[Any]) -> list[Any]:
    """Each run's cost from the index alone (None where its host has no price): no host
    is asked, so a resumed run counts from its first start and a live run until now."""
    prices = {h: hosts.for_host(h).price for h in {r.host for r in runs}}
    if not any(prices.values()):
        return [None] * len(runs)  # no price anywhere: the cost rule is not even imported
    from rtrain_tui.core.runs import cost

    now = datetime.now(UTC)
    return [cost.run_cost(r, prices[r.host], now) for r in runs]


def list_costs(index: RunIndex, hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`costs`: what the runs in the index spent, by host, day or run; asks no host."""
    from rtrain_tui.core.runs import cost

    now = datetime.now(UTC)
    try:
        since = now - parse_age(args.since) if args.since is not None else None
    except validate.ValidationError:
        raise validate.ValidationError(f"--since {args.since!r} is not an age: a number and h, "
                                       "d or w (hours, days, weeks), e.g. 7d.") from None
    report = _runs_report(index)
    rows, unpriced = cost.spent_by(report.records, lambda h: hosts.for_host(h).price, now,
                                   by=args.by, since=since)
    totals: dict[str, Any] = {}
    for row in rows:
        totals[row.currency] = totals.get(row.currency, 0) + row.amount
    if args.json:
        print(json.dumps({
            "since": since.isoformat() if since else None, "by": args.by,
            "rows": [{args.by: row.key, "runs": row.runs, "cost": float(row.amount),
                      "currency": row.currency} for row in rows],
            "total": [{"cost": float(amount), "currency": c} for c, amount in totals.items()],
            "unpriced_runs": unpriced}, indent=2))
        return 0
    if unpriced:
        _err(f"{unpriced} run{'' if unpriced == 1 else 's'} left out: their host has no price "
             f"(price_per_hour or price_per_gpu_hour in {hostconfig.default_config_path()}).")
    window = f" in the last {args.since.strip()}" if args.since else ""
    if not rows:
        print(f"nothing spent{window}.")
        return 0
    table: list[tuple[str, ...]] = [(args.by.upper(), "RUNS", "COST")]
    table += [(row.key, str(row.runs), cost.money(row.amount, row.currency)) for row in rows]
    table += [(f"total{window}", "", " + ".join(cost.money(a, c) for c, a in totals.items()))]
    if args.by == "run":  # a row per run: RUNS would read 1 on every row
        table = [(key, money) for key, _runs, money in table]
    line = "  ".join(f"{{:<{max(map(len, column))}}}" for column in zip(*table))
    print("\n".join(line.format(*row).rstrip() for row in table))
    return 0


def notify_test(hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`notify test [HOST]`: a test message to each URL, from this machine; 0 if all arrived."""
    from rtrain_tui.core.notify import send
    from rtrain_tui.core.safety.mask import mask_url

    if args.host is not None:
        urls = hosts.notify_urls(args.host)
    else:
        urls = tuple(dict.fromkeys((*hosts.notify.urls, *(u for h in hosts.hosts.values() for u in h.notify))))
    if not urls:
        _err(f"no notification URLs{f' for {args.host}' if args.host else ''}: add [notify] urls = "
             f'["ntfy://my-topic"] to {hosts.path or hostconfig.default_config_path()}.')
        return 1
    results = send.send_all(urls, "rtrain-tui: test", "A test message from rtrain-tui notify test.")
    for url, why in results.items():
        print(f"{mask_url(url)}: {'arrived' if not why else f'not sent: {why}'}")
    return 0 if not any(results.values()) else 1


def _sends_from_host(hosts: hostconfig.HostConfig, args: argparse.Namespace) -> bool:
    """`notify test HOST` with URLs HOST can send itself ([notify] on_host): it is asked too."""
    from rtrain_tui.core.notify import host_send

    return (args.host is not None and hosts.notify.on_host
            and bool(host_send.host_urls(hosts.notify_urls(args.host))))


def _say_left_to_clients(urls: Sequence[str], host: str) -> None:
    """`notify test HOST`: a line for each URL HOST cannot send itself (only apprise, on a
    client, can), also when that is every URL and HOST is not asked at all."""
    from rtrain_tui.core.notify import host_send
    from rtrain_tui.core.safety.mask import mask_url

    for url in urls:
        if not host_send.host_urls([url]):
            print(f"{mask_url(url)}: not sent from {host}: only apprise can send it, from a client")


async def cmd_notify(engine: Engine, args: argparse.Namespace) -> int:
    """`notify test HOST`: from this machine (notify_test), then from HOST itself, by the
    path a run's end takes there (the webhook URLs only: the rest are said as such)."""
    import asyncio

    from rtrain_tui.core.errors import UnknownHostError
    from rtrain_tui.core.safety.mask import mask_text

    urls = engine.hosts.notify_urls(args.host)
    try:
        # HOST first: a name that is no host (a typo) is said before anything is sent.
        await engine.host(args.host).connect()
    except UnknownHostError as exc:
        _err(str(exc))
        return 1
    except RemoteError:
        pass  # unreachable: this machine still sends; the host's half below says why not
    here = await asyncio.to_thread(notify_test, engine.hosts, args)
    try:
        results = await engine.notify_test_from_host(args.host, urls)
    except RemoteError as exc:
        _err(f"notify test from {args.host}: {mask_text(str(exc), urls)}")
        return 1
    for url, why in results:
        print(f"{url}: arrived from {args.host}" if not why else f"{url}: not sent from {args.host}: {why}")
    _say_left_to_clients(urls, args.host)
    return here or (1 if any(why for _, why in results) else 0)


async def cmd_watch(engine: Engine, args: argparse.Namespace) -> int:
    """`watch`: refresh every run in the index every --every seconds, so that what ends is
    told (core/notify) with no app open; Ctrl-C ends it, stopping nothing."""
    import asyncio

    from rtrain_tui.core import host_view

    if not 1 <= args.every <= 86_400:
        raise validate.ValidationError("--every must be 1 to 86400 seconds.")
    print(f"watching the runs in {engine.index.path} every {args.every:g}s; Ctrl-C ends it", flush=True)
    try:
        while True:
            records = await asyncio.to_thread(engine.index.load)
            await host_view.refresh(engine, records, words=False, went_on=True)
            await engine.notified()
            for line in engine.notices:
                _err(line)
            engine.notices.clear()
            await asyncio.sleep(args.every)
    except asyncio.CancelledError:
        raise _Cancelled(f"watch ended; {NOTHING_STOPPED}") from None


COMMANDS: dict[str, Callable[[Engine, argparse.Namespace], Awaitable[int]]] = {
    "preflight": cmd_preflight, "start": cmd_start, "tail": cmd_tail, "status": cmd_status,
    "fetch": cmd_fetch, "stop": cmd_stop, "runs": cmd_runs, "metrics": cmd_metrics,
    "resume": cmd_resume, "watch": cmd_watch, "notify": cmd_notify,
}
