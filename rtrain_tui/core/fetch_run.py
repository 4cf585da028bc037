"""Fetch from a run, the operation: what its run directory holds (the fetch browser's
listing) and a file or folder of it brought to this machine, by the transfer program
run with the run's own interpreter (the transfer itself is transfers/fetch.py's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers.transfer import Progress, RemoteEntry, list_tree
from rtrain_tui.core.transfers.transfer import fetch as fetch_into


async def list_run(ctx: Prober, host: str, workdir: str, run_id: str) -> list[RemoteEntry]:
    """Everything in the run dir (recursively), for the fetch browser."""
    run_dir = await ctx.run_dir(host, workdir, run_id)
    python = await ctx.run_python(host, workdir, run_id)
    return await list_tree(ctx.host(host), run_dir, python=python)


async def fetch(ctx: Prober, host: str, workdir: str, run_id: str, path: str, out: Path,
                progress: Progress | None = None,
                on_warning: Callable[[str], None] | None = None,
                on_landed: Callable[[Path], None] | None = None,
                python: str | None = None) -> Path:
    """Fetch `path` (relative to the run dir) into `out`; returns the local path.

    `on_warning` hears about what was left out (FIFOs, sockets: never regular files);
    `on_landed` about each file renamed into place, verified (a cancelled fetch keeps those).
    `python` runs the transfer on the host (default: the run's recorded interpreter).
    """
    rel = validate.check_fetch_path(path)
    if python is not None:
        validate.check_python(python)
    # The transfer program expands a leading `~` itself (as the shell would, from the
    # same HOME): a fetch whose workdir is not resolved yet needs no script in the
    # host's shell before its own program starts, one round trip and a login less.
    resolved = ctx.workdirs.get((host, validate.check_workdir(host, workdir)))
    run_dir = (f"{resolved}/{validate.check_run_id(run_id)}" if resolved is not None
               else remote_sh.run_dir_word(workdir, run_id))
    python = python or await ctx.run_python(host, workdir, run_id)
    return await fetch_into(ctx.host(host), run_dir, rel, out, progress, python=python,
                            on_warning=on_warning, on_landed=on_landed)
