"""Start: a new run on a host, through the launch path's stages (launch.py): check, the
dataset into the host's store (side by side with the preflight and the GPU choice: its
bytes are most of a start's time), choose GPUs, make the run dir, claim the GPUs, ship
the config, the dataset and the launch files, launch, record.

A start is a small transaction: the run enters the index as `starting` before anything
is launched, and while it is in progress the starting process holds a lock file named
by the run's token (local_locks.starting). A start that fails or is cancelled before
its launch removes its run directory and its entry; one whose launch outcome is unknown
(a dropped link, a killed client) stays `starting` until a refresh, finding the lock
free, reads what happened.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rtrain_tui.core import launch, local_locks
from rtrain_tui.core.backends import Backend, BackendOptions, GpuChoice, LaunchSpec
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.launch import (
    CLEANUP_TIMEOUT,
    CREATED,
    LAUNCHED,
    LAUNCHING,
    LEFT,
    REMOVED,
    CreatedCallback,
    StartedRun,
    StartRequest,
    StartTrace,
    StepCallback,
    Stored,
    place_when_stored,
    together,
    write_remote_text,
)
from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.runs.probes import PreflightReport
from rtrain_tui.core.transfers import delta
from rtrain_tui.core.transfers.meter import shipped_words
from rtrain_tui.core.transfers.transfer import (
    Progress,
    early_command,
    early_store,
    store_dataset,
    upload_file,
)
from rtrain_tui.core.transport import cold_ssh, openssh_pipe
from rtrain_tui.core.transport.bounded import bounded
from rtrain_tui.core.transport.connection import BoundedSFTP, HostConnection


def only_short_of_room(report: PreflightReport) -> bool:
    """Whether the disk check is the only reason `report` refuses."""
    return report.reachable and {c.name for c in report.checks if not c.ok and not c.warning} == {"disk"}



def early_workdir(workdir: str) -> bool:
    """Whether a dataset's `ssh` may start before `workdir` is resolved: an absolute one, or
    one under `~` (its host program expands that as the login shell does)."""
    return workdir.startswith(("/", "~/")) or workdir == "~"


def local_size(*paths: Path | None) -> int:
    """Bytes a start will upload (files that cannot be read fail later, with their own error)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size if path is not None else 0
        except OSError:
            pass
    return total


async def start(
    ctx: Prober, request: StartRequest, progress: Progress | None = None,
    on_step: StepCallback | None = None, on_created: CreatedCallback | None = None,
    trace: StartTrace | None = None,
) -> StartedRun:
    """Preflight, make the run dir, upload, launch; see start.py's docstring.

    `trace` (optional) is kept up to date with what the start has done on the host,
    so a caller whose start was cancelled can say what is left there.
    """
    trace = trace if trace is not None else StartTrace()
    req, kind, options = await launch.checked(ctx, request)
    step = on_step or (lambda _msg: None)
    step(f"preflight {req.host}")
    ship = await asyncio.to_thread(local_size, req.config, req.dataset)
    # The dataset goes into the host's store while the preflight, the GPU choice and
    # the run dir are under way: its bytes are most of a start's time, and a store
    # entry is only ever verified content, never a run's. A start that fails or is
    # cancelled before it needs the dataset cancels the upload (the host program
    # removes its part file); nothing is launched before the preflight said yes.
    # The dataset's chunk manifest (transfers/delta.py) is written beside placing it
    # and the launch, not before them; the start waits for it only at its end.
    manifests: list[asyncio.Future[None]] = []
    # A new process's big dataset: its `ssh` logs in before asyncssh is even imported.
    cold = await _cold_bulk(ctx, req)
    early: list[asyncio.Future[Any]] = []
    failed = True
    try:
        storing = (asyncio.ensure_future(_store(ctx, req, req.dataset, progress, manifests,
                                                     cold))
                   if req.dataset is not None else None)
        early += [storing] if storing is not None else []
        # The SFTP channel the config and the launch files go over opens meanwhile too
        # (a few round trips of its own).
        opening = asyncio.ensure_future(ctx.host(req.host).sftp())
        early.append(opening)
        started = await _start_checked(ctx, req, kind, options, ship, storing, opening,
                                            progress, step, on_created, trace)
        failed = False
        return started
    finally:
        for task in early:
            task.cancel()  # a no-op once it is done
        await asyncio.gather(*early, return_exceptions=True)
        if cold is not None:
            await cold.discard()  # a no-op once the upload took it
        for writing in manifests:
            await delta.settle(writing, abandon=failed)


async def _cold_bulk(ctx: Prober, req: StartRequest) -> cold_ssh.Spawned | None:
    """A big dataset's `ssh`, started before this host's connection is made (and so,
    in a new process, before asyncssh is imported: cold_ssh.py); None where not."""
    if req.dataset is None or ctx.pool.knows(req.host) or not early_workdir(req.workdir):
        return None
    try:
        if req.dataset.stat().st_size < openssh_pipe.MIN_BYTES:
            return None
        command = early_command(req.dataset, req.workdir, req.python)
    except OSError:
        return None  # the upload says what is wrong with the file
    return await cold_ssh.spawn(ctx.pool.ssh_config, req.host, command)


async def _store(ctx: Prober, req: StartRequest, dataset: Path, progress: Progress | None,
                 later: list[asyncio.Future[None]],
                 cold: cold_ssh.Spawned | None = None) -> Stored:
    """Send `dataset` into the store of `req`'s workdir (Stored says where and how).
    A manifest write still under way is appended to `later`. `cold`: its `ssh`,
    started already (cold_ssh.py)."""
    began = time.monotonic()
    conn = ctx.host(req.host)
    # A big dataset's own `ssh` logs in while the workdir is resolved, not after: the
    # host program expands a leading `~` itself (the default workdir has one).
    early = (await early_store(conn, dataset, req.workdir, req.python, cold)
             if early_workdir(req.workdir) else None)
    try:
        workdir = await ctx.workdir_path(req.host, req.workdir)
        shipped = await store_dataset(conn, dataset, workdir, progress,
                                      python=req.python, later=later, early=early)
    finally:
        if early is not None:
            await early.close()  # a no-op once the upload took it
    return Stored(workdir, shipped.digest, shipped_words(  # the size the upload read
        dataset.name, shipped.size, shipped.how, shipped.wire, time.monotonic() - began,
        req.host))


async def _start_checked(
    ctx: Prober, req: StartRequest, kind: Backend, options: BackendOptions | None, ship: int,
    storing: asyncio.Future[Stored] | None, opening: asyncio.Future[BoundedSFTP],
    progress: Progress | None, step: StepCallback, on_created: CreatedCallback | None,
    trace: StartTrace,
) -> StartedRun:
    """The start from its preflight on (see `start`); `storing` sends the dataset,
    `opening` opens the SFTP channel."""
    report = await ctx.preflight(req.host, req.gpus, req.python, req.workdir,
                                  ship_bytes=ship, backend=kind.name, options=options)
    if not report.ok and storing is not None and only_short_of_room(report):
        # The preflight counts the dataset's bytes, but a dataset the host stores
        # already is linked, needing no room: the store says whether it had to send
        # it (and had room). Failed, the start is refused as the preflight says.
        try:
            await storing
        except RemoteError:
            pass
        else:
            report = replace(report, checks=tuple(c for c in report.checks if c.name != "disk"))
    if not report.ok:
        raise RemoteError(f"{req.host} is not ready: " + "; ".join(report.why_not))
    if storing is not None and storing.done():
        storing.result()  # an upload that already failed (no space…): said before a run dir
    # One start at a time chooses GPUs on a host, from choosing until its run (and the
    # GPUs it got) is in the index, where the next start sees them taken.
    async with launch.choosing_gpus(ctx, req, kind) as chosen:
        # Where the client does not choose GPUs (a scheduler hands them out), the
        # trainer's env is the request's.
        env, gpu_ids = (await launch.gpu_env(ctx, req, step) if isinstance(kind, GpuChoice)
                        else (dict(req.env), ""))
        # The host chooses a queued run's GPUs, when its turn comes.
        queue = ((req.gpus, req.gpu_ids) if launch.queues(req) and isinstance(kind, GpuChoice)
                 else None)
        conn = ctx.host(req.host)
        token = secrets.token_hex(16)
        nodes, per_node = kind.placement(req.gpus, options)
        with local_locks.starting(ctx.index, token):
            def starting(run_id: str) -> RunRecord:
                return RunRecord(
                    host=req.host, run_id=run_id, workdir=req.workdir, python=req.python,
                    state=probes.STARTING, started_at=index_now(), updated_at=index_now(),
                    config=str(req.config), dataset=str(req.dataset or ""), gpus=per_node,
                    token=token, gpu_ids=gpu_ids, backend=kind.name, nodes=nodes,
                )

            run_id, run_dir = await _make_run_dir(ctx, conn, req, token, starting, trace)
            record = starting(run_id)
            ctx.kinds[record.key] = record.backend
            launching = False
            try:
                if gpu_ids and isinstance(kind, GpuChoice):
                    await launch.claim_gpus(conn, kind, req, run_id, gpu_ids)
                await asyncio.to_thread(ctx.index.add, record)
                chosen.release()  # the index says which GPUs this run has now
                if on_created:
                    on_created(run_id, run_dir)
                step(f"uploading to {run_dir}")
                # The channel opened during the preflight, asked for again: one that
                # died since with its connection (a script re-sent on a new one after a
                # drop) is replaced, not written to.
                await asyncio.gather(opening, return_exceptions=True)
                sftp = await conn.sftp()
                dataset_name = req.dataset.name if req.dataset is not None else None
                spec = LaunchSpec(run_id, token, req.trainer, req.python, dataset_name,
                                  req.gpus, env, options, retries=req.retries or 0, queue=queue,
                                  retry_base_s=retry_rule.base_seconds(),
                                  stall_after_s=req.stall_after_s or 0,
                                  stall_check_s=retry_rule.stall_check_seconds(),
                                  gpus_idle_s=retry_rule.gpus_idle_seconds(),
                                  on_stall=req.on_stall)
                spec = await launch.notify_from_host(ctx, sftp, run_dir, spec, record, kind)
                # What was launched, for a later resume (core/resume.py): the user's env,
                # not the GPUs chosen now; a resume chooses them again.
                launched_as = launch.launch_json(
                    req.trainer, req.python, dataset_name, req.gpus, dict(req.env),
                    req.gpu_ids, req.allow_busy, options, retries=req.retries or 0,
                    retry_base_s=spec.retry_base_s, stall=(spec.stall_after_s,
                                                           spec.stall_check_s, spec.on_stall))
                # The config, the launch files and the dataset (once it is stored: a big
                # one still arrives) side by side: each is a few round trips, which add
                # up on a distant host.
                await together(
                    upload_file(conn, sftp, req.config, f"{run_dir}/config.yaml", progress),
                    *launch.ship_launch_files(sftp, run_dir, kind, spec, kind.launch_file),
                    write_remote_text(sftp, f"{run_dir}/{launch.LAUNCH_JSON}", launched_as),
                    *([] if storing is None or dataset_name is None else
                      [place_when_stored(conn, storing, dataset_name, run_dir)]))
                step(kind.launch_step)
                launching, trace.stage = True, LAUNCHING
                out = dict(probes.parse_key_values(await conn.run(kind.launch_script(run_dir, token))))
            except BaseException:
                if not launching:
                    await _abandon(ctx, conn, record, trace)
                # Else the launch may or may not have happened: the entry stays
                # `starting` and the next refresh reads the truth from the host.
                raise
            if "error" in out:
                await _abandon(ctx, conn, record, trace)
                raise RemoteError(f"{req.host}: the run did not launch ({out['error']}).")
            trace.stage = LAUNCHED
            launched = kind.launched(req.host, run_id, out)
            if queue is not None:  # its wrapper lives, waiting in the host's queue
                launched = replace(launched, state=probes.QUEUED)
            record = replace(record, state=launched.state, updated_at=index_now(),
                             job_id=launched.job_id)
            unrecorded = await launch.record_launched(ctx, record)
        # Placed in the run dir above, so stored by now.
        said = storing.result().said if storing is not None and storing.done() else ""
        return StartedRun(req.host, run_id, run_dir, launched.pid, record, job_id=launched.job_id,
                          submit_message=launched.message, unrecorded=unrecorded,
                          dataset=said)


async def _abandon(ctx: Prober, conn: HostConnection, record: RunRecord, trace: StartTrace,
                   recorded: bool = True) -> None:
    """Undo a start that never launched: its run dir on the host, its index entry.

    Runs even while the start is being cancelled, bounded so it never hangs. A run
    dir that cannot be removed now keeps (or, when the start had not `recorded` it
    yet, gets) its `starting` entry, and the next refresh removes it: a directory
    holding only `train.token` that no entry names would refuse its run id for good.
    """
    try:
        out = await bounded(asyncio.shield(conn.run(
            remote_sh.remove_unlaunched(record.workdir, record.run_id, record.token),
            timeout=CLEANUP_TIMEOUT)), CLEANUP_TIMEOUT)
    except (TimeoutError, RemoteError, asyncio.CancelledError):
        out = ""
    removed = dict(probes.parse_key_values(out)).get("removed")
    try:
        if removed in ("1", "gone"):
            trace.stage = REMOVED
            await asyncio.to_thread(ctx.index.remove, record.key)
        else:  # not removed (unreachable, or no longer ours to remove): refresh decides
            trace.stage = LEFT
            if not recorded:
                await asyncio.to_thread(ctx.index.add_new, [record])
    except RemoteError:
        pass  # a busy index: an entry left `starting` is settled by a refresh


async def _make_run_dir(ctx: Prober, conn: HostConnection, req: StartRequest, token: str,
                        starting: Callable[[str], RunRecord],
                        trace: StartTrace) -> tuple[str, str]:
    """Create the run dir atomically; an auto id is made unique, a chosen one refused.

    Cut off (a cancel, a timeout, a dropped link) while the host may have made the
    directory, the start removes it again, or leaves it to the next refresh.
    """
    base = req.run_id or f"run-{int(time.time())}"
    for n in range(1, 100):
        run_id = base if n == 1 else f"{base}-{n}"
        making = asyncio.ensure_future(conn.run(remote_sh.make_run_dir(req.workdir, run_id, token)))
        try:
            out = await asyncio.shield(making)
        except BaseException:
            # Cancelled, the script already sent would still run on the host (its
            # shell is closed, not its command), and could make the directory after
            # the removal below said it was gone: its answer is waited for first.
            try:
                await bounded(asyncio.shield(making), CLEANUP_TIMEOUT)
            except BaseException:
                making.cancel()
            trace.run_id = run_id
            await _abandon(ctx, conn, starting(run_id), trace, recorded=False)
            raise
        facts = dict(probes.parse_key_values(out))
        if "dir" in facts:
            trace.run_id, trace.run_dir, trace.stage = run_id, facts["dir"], CREATED
            return run_id, facts["dir"]
        if out.strip() != "exists":
            raise RemoteError(f"{req.host}: cannot create the run directory: {out.strip()[:200]}")
        if req.run_id is not None:
            raise RemoteError(
                f"run id {run_id!r} already exists on {req.host}; pick another --run-id."
            )
    raise RemoteError(f"{req.host}: could not find a free run id near {base!r}.")
