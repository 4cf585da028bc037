"""`rtrain-tui start HOST -c CONFIG`: ship, launch detached, then follow the log."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import Cancelled, err, hint, program, refuse_slurm_flags, slurm_options
from rtrain_tui.cli.tail import follow
from rtrain_tui.core.safety import validate

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine, StartTrace


async def cmd_start(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    from rtrain_tui.core.engine import StartRequest, StartTrace
    from rtrain_tui.progress_view import TerminalProgress

    gpu_ids = validate.parse_gpu_ids(args.gpu_ids) if args.gpu_ids is not None else ()
    gpus = args.gpus if args.gpus is not None else (len(gpu_ids) if gpu_ids else 1)
    if (args.backend or engine.backend_of_host(args.host)) != "slurm":
        refuse_slurm_flags(args)
    request = StartRequest(
        host=args.host, config=Path(args.config),
        dataset=Path(args.dataset) if args.dataset else None, gpus=gpus,
        run_id=args.run_id, python=args.python, workdir=args.workdir,
        env=validate.parse_env(args.env), trainer=args.trainer,
        gpu_ids=gpu_ids, allow_busy=args.allow_busy, queue=args.queue,
        backend=args.backend, retries=args.retries, on_stall=args.on_stall,
        stall_after_s=validate.parse_duration(args.stall_after, "--stall-after")
        if args.stall_after is not None else None,
        options=slurm_options(engine.hosts, args)
        if (args.backend or engine.backend_of_host(args.host)) == "slurm" else None,
    ).validated()
    def created(run_id: str, run_dir: str) -> None:
        # Said before anything that can fail after the run dir exists: a client killed
        # from here on still leaves the user the id to look for (and the index has it).
        err(f"run {run_id} created on {args.host} ({run_dir})")

    trace = StartTrace()
    try:
        with TerminalProgress() as progress:
            started = await engine.start(request, progress=progress.update, on_created=created,
                                         trace=trace)
    except asyncio.CancelledError:
        raise Cancelled(_start_cancelled(args, trace)) from None
    if started.record.gpu_ids:
        # stderr: scripts parse the lines below, which stay as they were.
        err(f"{started.run_id} gets GPU(s) {started.record.gpu_ids} on {args.host} "
             "(CUDA_VISIBLE_DEVICES)")
    if started.submit_message:
        err(f"{args.host} said: {started.submit_message}")  # the cluster's notice, on stderr
    if started.record.state == "queued" and not started.job_id:
        want = f"GPU(s) {args.gpu_ids}" if args.gpu_ids else f"{gpus} free GPU(s)"
        err(f"{started.run_id} is queued on {args.host}: it waits there for {want}, "
             "in the order runs were queued (it holds with this client closed)")
    if started.dataset:
        err(started.dataset)  # the progress line is gone: how the bytes went, on stderr
    job = f" (Slurm job {started.job_id})" if started.job_id else ""
    print(f"started {started.run_id} on {args.host}{job}")
    print(f"  tail: {hint(args, 'tail', started.run_id)}")
    print(f"  stop: {hint(args, 'stop', started.run_id)}", flush=True)
    if started.unrecorded:
        # Exit 0 all the same: the trainer runs, and a script that retried on an error
        # would start a second one.
        err(f"warning: {started.run_id} is running on {args.host}, but the run index could "
             f"not record it ({started.unrecorded}); the next `{program()} runs --refresh` "
             "(or the app's refresh) records it.")
    if not args.follow:
        return 0
    return await follow(engine, args.host, args.workdir, started.run_id, raw=args.raw,
                         args=args)


def _start_cancelled(args: argparse.Namespace, trace: StartTrace) -> str:
    """What a cancelled start left on the host, and what to do about it."""
    from rtrain_tui.core.engine import CREATED, LAUNCHED, LAUNCHING, LEFT

    said, run = f"start cancelled; {trace.left(args.host)}", trace.run_id
    if trace.stage in (CREATED, LEFT):
        return f"{said} (`{program()} runs --refresh`)."
    if trace.stage == LAUNCHING:
        return (f"{said}; `{hint(args, 'status', run)}` tells, "
                f"`{hint(args, 'stop', run)}` stops it.")
    if trace.stage == LAUNCHED:
        return f"detached: {trace.left(args.host)}; `{hint(args, 'stop', run)}` stops it."
    return f"{said}."
