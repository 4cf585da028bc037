"""`rtrain-tui fetch HOST RUN PATH`: copy from the run directory (a checkpoint only when complete)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import Cancelled, hint
from rtrain_tui.core.errors import NoSuchPathError, RemoteError
from rtrain_tui.core.safety import validate

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


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
        raise Cancelled(f"fetch cancelled; {kept}; every partial file was removed.") from None
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
            f"`{hint(args, 'fetch', args.run_id, newest.path, *out)}` fetches it.")


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
