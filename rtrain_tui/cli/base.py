"""What several commands share: the one-line error, the hints a user pastes to find a
run again, the cancel a command reports, and the Slurm flags' check."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.core.transport.sshconfig import default_ssh_config, list_hosts

if TYPE_CHECKING:
    from rtrain_tui.core.backends import slurm


ALL_HOSTS = "\0all"  # `--discover` without a host: not a name anyone can type
NOTHING_STOPPED = "nothing on the host was stopped; a run keeps going."


def err(message: str) -> None:
    # Messages quote host text (aliases, remote errors): one line, no control sequences.
    print(f"rtrain-tui: {safe_line(message)}", file=sys.stderr)


class Cancelled(Exception):
    """Raised by a command whose work was cancelled, with the line that says what it did
    (the run left behind, the files kept); `run` turns it into `_Stopped`."""

    def __init__(self, line: str) -> None:
        self.line = line


def program() -> str:
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


def hint(args: argparse.Namespace, command: str, run_id: str, *more: str) -> str:
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
    return f"{program()} {shlex.join(words)}"


def demo_needs_flag(args: argparse.Namespace) -> bool:
    """The built-in demo host is not served (no --demo) and no ssh config host is `demo`."""
    return not args.demo and "demo" not in list_hosts(args.ssh_config or default_ssh_config())


def refuse_slurm_flags(args: argparse.Namespace) -> None:
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


def slurm_options(engine_hosts: hostconfig.HostConfig, args: argparse.Namespace) -> slurm.SlurmOptions:
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
