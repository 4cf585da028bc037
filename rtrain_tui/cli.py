"""The command line: `rtrain-tui preflight|start|tail|status|fetch|stop|runs`, or the TUI.

Thin over `rtrain_tui.core`: parse, validate, call the engine, print. Every expected
failure is one line on stderr and exit 1 (argparse's usage errors exit 2); Textual is
imported only when the TUI is asked for, so scripted calls start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from rtrain_tui.core import hostconfig, probes, slurm, validate
from rtrain_tui.core.connection import ConnectionPool
from rtrain_tui.core.engine import Engine, StartRequest
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.index import RunIndex, default_index_path
from rtrain_tui.core.sanitize import safe_line
from rtrain_tui.core.logstream import LogFollower, LogLines
from rtrain_tui.core.sshconfig import default_ssh_config
from rtrain_tui.progress_view import TerminalProgress


def _add_remote(p: argparse.ArgumentParser, python: bool = True) -> None:
    p.add_argument("--workdir", default=None,
                   help="run directory parent on the host (default: the one the run index "
                   f"recorded for this run, else {validate.DEFAULT_WORKDIR})")
    if python:
        p.add_argument("--python", default=validate.DEFAULT_PYTHON,
                       help="python on the host (default: %(default)s)")


def _add_slurm(p: argparse.ArgumentParser, start: bool) -> None:
    """The Slurm flags; each overrides the host's config.toml default."""
    g = p.add_argument_group("Slurm (a login node: --backend slurm, or backend = \"slurm\" in config.toml)")
    g.add_argument("--backend", default=None, choices=slurm.BACKENDS,
                   help="how runs are launched (default: the host's config.toml setting, else direct)")
    g.add_argument("--partition", default=None, help="Slurm partition")
    g.add_argument("--gpus-per-node", type=int, default=None, help="default: --gpus")
    if not start:
        return
    g.add_argument("--nodes", type=int, default=None, help="nodes (default 1; >1: srun + torchrun)")
    g.add_argument("--time", default=None, help="time limit, e.g. 30, 4:00:00, 1-12:00:00")
    g.add_argument("--account", default=None)
    g.add_argument("--qos", default=None)
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
    parser.add_argument("--ssh-config", type=Path, default=None, help="default: ~/.ssh/config")
    parser.add_argument("--index", type=Path, default=None,
                        help="run index (default: $XDG_DATA_HOME/rtrain-tui/runs.toml)")
    parser.add_argument("--demo", action="store_true",
                        help="add the built-in demo host `demo` (no GPU box needed)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("preflight", help="check that a host is ready to train")
    p.add_argument("host")
    p.add_argument("--gpus", type=int, default=1, help="GPUs needed; 0 for a CPU-only run")
    _add_remote(p)
    _add_slurm(p, start=False)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("start", help="ship config and dataset, launch the trainer detached")
    p.add_argument("host")
    p.add_argument("-c", "--config", required=True, help="training config (YAML)")
    p.add_argument("-d", "--dataset", default=None, help="dataset file, shipped under its own name")
    p.add_argument("--gpus", type=int, default=1, help="GPUs needed; 0 for a CPU-only run")
    p.add_argument("--run-id", default=None, help="default: run-<epoch>")
    _add_remote(p)
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
        p = sub.add_parser(name, help=text)
        p.add_argument("host")
        p.add_argument("run_id", metavar="RUN_ID")
        _add_remote(p)
        if name == "status":
            p.add_argument("--json", action="store_true")
        else:
            p.add_argument("--raw", action="store_true", help=RAW_HELP)

    p = sub.add_parser("fetch", help="copy a file or directory from the run directory")
    p.add_argument("host")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("path", metavar="PATH", help="relative to the run dir, e.g. lora_model")
    p.add_argument("--out", type=Path, default=Path("."), help="local directory (default: .)")
    _add_remote(p)

    p = sub.add_parser("stop", help="stop the run's whole process group and verify it is gone")
    p.add_argument("host")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL (default: %(default)s)")
    _add_remote(p)

    p = sub.add_parser("runs", help="list the runs in the local index")
    p.add_argument("--refresh", action="store_true", help="update every run's state from its host")
    p.add_argument("--json", action="store_true")
    return parser


def _err(message: str) -> None:
    # Messages quote host text (aliases, remote errors): one line, no control sequences.
    print(f"rtrain-tui: {safe_line(message)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run a command; every expected failure is one line on stderr and exit 1."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
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
        _err("detached: nothing on the host was stopped; the run keeps going.")
        return 130
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
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
    ssh_config = args.ssh_config or default_ssh_config()
    index = RunIndex(args.index or default_index_path())
    if args.command is None:
        from rtrain_tui.tui.app import run_app  # Textual only for the TUI

        return run_app(ssh_config=ssh_config, index=index, demo=args.demo)
    handler: Callable[[Engine, argparse.Namespace], Awaitable[int]] = COMMANDS[args.command]
    if hasattr(args, "workdir") and args.workdir is None:
        try:
            args.workdir = _recorded_workdir(index, args)
        except RemoteError as exc:
            _err(str(exc))
            return 1

    # A config.toml that cannot be used is one line, before anything touches a host.
    hosts = hostconfig.load()

    async def run() -> int:
        engine = Engine(ConnectionPool(ssh_config, on_warning=lambda m: _err(f"warning: {m}")),
                        index, hosts)
        demo = None
        if args.demo:
            from rtrain_tui.demo.server import start_demo_host

            demo = await start_demo_host()
            engine.pool.add(demo.connection())
        try:
            return await handler(engine, args)
        finally:
            await engine.close()
            if demo is not None:
                await demo.close()

    return asyncio.run(run())


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
    report = await engine.preflight(args.host, args.gpus, args.python, args.workdir, backend, options)
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
        print(f"    GPU {g.index}: {g.name}  {g.memory_used_mib}/{g.memory_total_mib} MiB  "
              f"{g.utilization_pct}% busy")
    for job in report.jobs:
        print(f"    job {job.replace('|', '  ').strip()}")
    if report.ok:
        print(f"{args.host} is ready")
        return 0
    _err(f"{args.host} is not ready: " + "; ".join(report.why_not))
    return 1


def _run_flags(args: argparse.Namespace) -> str:
    return "" if args.workdir == validate.DEFAULT_WORKDIR else f" --workdir {args.workdir}"


async def cmd_start(engine: Engine, args: argparse.Namespace) -> int:
    if (args.backend or engine.backend_of_host(args.host)) != "slurm":
        _refuse_slurm_flags(args)
    request = StartRequest(
        host=args.host, config=Path(args.config),
        dataset=Path(args.dataset) if args.dataset else None, gpus=args.gpus,
        run_id=args.run_id, python=args.python, workdir=args.workdir,
        env=validate.parse_env(args.env), trainer=args.trainer,
        backend=args.backend,
        slurm=_slurm_options(engine.hosts, args)
        if (args.backend or engine.backend_of_host(args.host)) == "slurm" else None,
    ).validated()
    def created(run_id: str, run_dir: str) -> None:
        # Said before anything that can fail after the run dir exists: a client killed
        # from here on still leaves the user the id to look for (and the index has it).
        _err(f"run {run_id} created on {args.host} ({run_dir})")

    with TerminalProgress() as progress:
        started = await engine.start(request, progress=progress.update, on_created=created)
    flags = _run_flags(args)
    job = f" (Slurm job {started.job_id})" if started.job_id else ""
    print(f"started {started.run_id} on {args.host}{job}")
    print(f"  tail: rtrain-tui tail {args.host} {started.run_id}{flags}")
    print(f"  stop: rtrain-tui stop {args.host} {started.run_id}{flags}", flush=True)
    if not args.follow:
        return 0
    return await _follow(engine, args.host, args.workdir, started.run_id, raw=args.raw)


async def _follow(engine: Engine, host: str, workdir: str, run_id: str, raw: bool = False) -> int:
    """Print the log until the run ends; exit 0 only when it completed.

    An outage is waited out (the run keeps going on the host). A permanent failure
    (host key changed, auth refused, no such host) ends the stream by raising a
    RemoteError, which `main` prints as one line before exiting 1.
    """
    # A host never reached in 30 s (a dead port, a down box) is given up on; one that
    # answered once is waited for as long as the outage lasts.
    follower = LogFollower(engine, host, workdir, run_id, give_up_after=30.0)
    final = probes.UNKNOWN
    lost = False
    async for event in follower.events():
        if isinstance(event, LogLines):
            sys.stdout.write("".join((line if raw else safe_line(line)) + "\n" for line in event.lines))
            sys.stdout.flush()
        elif event.status == "reconnecting":
            lost = True
            _err(f"lost {host} ({event.detail}); reconnecting, the run keeps going…")
        elif event.status == "live" and lost:
            lost = False
            _err(f"reconnected to {host}; following again")
        elif event.status == "queued":
            why = f" ({event.detail})" if event.detail else ""
            _err(f"{run_id} is queued on {host}{why}; waiting for it to start…")
        elif event.status == "started":
            _err(f"{run_id} left the queue on {host}: {event.run_state}")
        elif event.status == "ended":
            final = event.run_state
    engine.remember_state(host, workdir, run_id, final)
    print(f"{run_id} on {host}: {final}")
    return 0 if final == probes.COMPLETED else 1


async def cmd_tail(engine: Engine, args: argparse.Namespace) -> int:
    validate.check_run_id(args.run_id)
    validate.check_workdir(args.host, args.workdir)
    return await _follow(engine, args.host, args.workdir, args.run_id, raw=args.raw)


async def cmd_status(engine: Engine, args: argparse.Namespace) -> int:
    probe = await engine.probe(args.host, args.workdir, args.run_id)
    engine.remember_state(args.host, args.workdir, args.run_id, probe.state)
    if args.json:
        print(json.dumps({
            "host": args.host, "run_id": args.run_id, "workdir": args.workdir,
            "state": probe.state, "pid": probe.pid, "exit_code": probe.exit_code,
            "exists": probe.exists, "stop_requested": probe.stop_requested,
            "reason": probe.reason, "slurm_job_id": probe.job_id or None,
            "slurm_state": probe.slurm_state or None,
        }, indent=2))
    elif probe.reason:
        print(f"{probe.state} ({probe.reason})")
    else:
        print(probe.state)
    return 0


async def cmd_fetch(engine: Engine, args: argparse.Namespace) -> int:
    # Engine.fetch validates the path, run id and workdir before it connects.
    warnings: list[str] = []
    with TerminalProgress() as progress:
        dest = await engine.fetch(args.host, args.workdir, args.run_id, args.path, args.out,
                                  progress.update, on_warning=warnings.append)
    for warning in warnings:  # after the progress line is gone; names already made inert
        print(f"rtrain-tui: warning: {warning}", file=sys.stderr)
    print(f"fetched to {dest}")
    return 0


async def cmd_stop(engine: Engine, args: argparse.Namespace) -> int:
    def step(message: str) -> None:
        if sys.stderr.isatty():
            print(f"  {message}", file=sys.stderr)

    print(await engine.stop(args.host, args.workdir, args.run_id, args.grace, step))
    return 0


async def cmd_runs(engine: Engine, args: argparse.Namespace) -> int:
    if args.refresh:
        await engine.refresh()
    runs = engine.index.load()
    if args.json:
        print(json.dumps([
            {"host": r.host, "run_id": r.run_id, "state": r.state, "stale": r.stale,
             "started_at": r.started_at, "updated_at": r.updated_at, "workdir": r.workdir,
             "backend": r.backend or "direct", "slurm_job_id": r.slurm_job_id or None}
            for r in runs
        ], indent=2))
        return 0
    if not runs:
        print("no runs yet; start one with: rtrain-tui start HOST -c CONFIG -d DATASET")
        return 0
    rows = [("HOST", "RUN", "STATE", "STARTED")] + [
        (r.host, r.run_id, r.state + (" (stale)" if r.stale else ""), r.started_at) for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


COMMANDS: dict[str, Callable[[Engine, argparse.Namespace], Awaitable[int]]] = {
    "preflight": cmd_preflight, "start": cmd_start, "tail": cmd_tail, "status": cmd_status,
    "fetch": cmd_fetch, "stop": cmd_stop, "runs": cmd_runs,
}
