"""The one launch path: every attempt of a run, a start's first or a resume's next, goes
through the same stages, in this order, and each entry point picks the ones it needs
(docs/design.md, "One life of a run"; the model is SkyPilot's `sky/execution.py`, where
`launch` and `exec` are one pipeline over different stage lists):

    stage              start (start.py)                   resume (resume.py)
    check              StartRequest.validated, checked()  its launch.json, read back
    store the dataset  transfers' store, side by side     - (its run dir has it)
    choose GPUs        choosing_gpus + gpu_env            choosing_gpus + gpu_env
    make the attempt   the run dir (make_run_dir)         ship first, then resume.sh's claim
    claim the GPUs     claim_gpus                         claim_gpus
    ship the files     config, dataset, launch.json       -
                       + ship_launch_files                ship_launch_files (before its claim)
    launch             the backend's launch script        the same
    record             record_launched                    record_launched

The GPUs are claimed on the host once the attempt has a place to record them (its run
dir): under the host's GPU lock, refused when a live run of ours was given one of them
since the sample. A start and a resume claim them the same way, so another laptop never
gets them too.

Also here: what a start asks for (`StartRequest`), what a launch gives back
(`StartedRun`), how far a start got (`StartTrace`), and the small writes to the host
every stage that ships files uses.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from rtrain_tui.core import backends
from rtrain_tui.core import host as host_files
from rtrain_tui.core.backends import Backend, BackendOptions, GpuChoice, LaunchSpec
from rtrain_tui.core.errors import GpusBusyError, IndexBusyError, RemoteError
from rtrain_tui.core.local_locks import HostLock, gpu_choice_lock
from rtrain_tui.core.metrics import gpus as gpu_choice
from rtrain_tui.core.notify import host_send
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import attempt_layout, probes
from rtrain_tui.core.runs import cost as run_cost
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety import template as trainer_template
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.core.transfers.transfer import place_dataset
from rtrain_tui.core.transport.connection import BoundedSFTP, HostConnection

StepCallback = Callable[[str], None]
CreatedCallback = Callable[[str, str], None]  # (run id, run dir): the run now exists
CLEANUP_TIMEOUT = 15.0  # a failed start's clean-up on the host never hangs the user
# How long a start waits for another start on the same host to finish choosing GPUs (a
# GPU sample, the run dir, an index write: a second or two, unless that host hangs).
GPU_CHOICE_WAIT = 120.0


# The commands whose `{dataset}` may be empty: `praisonai_train llm [DATASET]`.
BUILT_IN_TRAINERS = (validate.DEFAULT_TRAINER, *backends.built_in_trainers())


@dataclass(frozen=True)
class StartRequest:
    host: str
    config: Path
    dataset: Path | None = None
    gpus: int = 1
    run_id: str | None = None
    python: str = validate.DEFAULT_PYTHON
    workdir: str = validate.DEFAULT_WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    trainer: str = validate.DEFAULT_TRAINER
    gpu_ids: tuple[int, ...] = ()  # chosen by hand; else the `gpus` least busy free ones
    allow_busy: bool = False  # take GPUs someone else is using rather than refuse
    # Wait on the host for free GPUs (a box; the wrapper waits in the host's queue, see
    # backends/direct/queue.sh) rather than refuse. `gpus` 0 never waits.
    queue: bool = False
    backend: str | None = None  # None: the host's config.toml setting (see backends.DEFAULT)
    # The backend's own options (e.g. a login node's partition); None: the host's
    # config.toml defaults. A backend without options ignores them.
    options: BackendOptions | None = None
    # `--retries N`: a failed run is tried again by the host; None: the host's
    # config.toml `retries` (0 when unset).
    retries: int | None = None
    # Notice a stall: no log output for this many seconds (None: the host's config.toml
    # `stall_after`, else 15 min; 0: never), and what the host does then.
    stall_after_s: int | None = None
    on_stall: str = "warn"

    def validated(self) -> StartRequest:
        """Check every field the way the seed does; raises ValidationError."""
        validate.check_host(self.host)
        if self.backend is not None:
            backends.check_backend(self.backend)
        if self.options is not None:
            self.options.validated()
        if self.run_id is not None:
            validate.check_run_id(self.run_id)
        validate.check_workdir(self.host, self.workdir)
        validate.check_python(self.python)
        validate.check_gpus(self.gpus)
        if self.retries is not None:
            validate.check_retries(self.retries)
        validate.check_on_stall(self.on_stall, self.retries, self.stall_after_s)
        if self.gpu_ids:
            validate.parse_gpu_ids(",".join(str(i) for i in self.gpu_ids))
            if len(self.gpu_ids) != self.gpus:
                raise validate.ValidationError(
                    f"--gpus {self.gpus} and --gpu-ids {','.join(map(str, self.gpu_ids))} "
                    "disagree; give --gpu-ids alone.")
        validate.check_trainer_template(self.trainer)
        if (self.dataset is None and self.trainer not in BUILT_IN_TRAINERS
                and trainer_template.uses(self.trainer, "dataset")):
            # Only the built-in command takes its dataset as optional (the config can name
            # one); in the user's own command `{dataset}` would render as nothing and the
            # trainer would fail on the host without a reason.
            raise validate.ValidationError(
                "the --trainer template uses {dataset} but no dataset was given: add "
                "-d DATASET, or take {dataset} out of the template.")
        validate.parse_env([f"{key}={value}" for key, value in self.env.items()])
        if self.gpu_ids and "CUDA_VISIBLE_DEVICES" in self.env:
            raise validate.ValidationError(
                "--gpu-ids and --env CUDA_VISIBLE_DEVICES both choose GPUs; give one of them.")
        if self.queue and self.allow_busy:
            raise validate.ValidationError(
                "--queue waits for free GPUs and --allow-busy shares busy ones; give one of them.")
        if self.queue and "CUDA_VISIBLE_DEVICES" in self.env:
            raise validate.ValidationError(
                "--queue lets the host choose the GPUs, --env CUDA_VISIBLE_DEVICES chooses them "
                "by hand; use --gpu-ids with --queue instead.")
        validate.check_local_file("config", self.config)
        if self.dataset is not None:
            validate.check_dataset_name(Path(self.dataset).name)
            validate.check_local_file("dataset", self.dataset)
        return self


@dataclass(frozen=True)
class StartedRun:
    host: str
    run_id: str
    run_dir: str
    pid: int
    record: RunRecord
    job_id: str = ""  # a scheduler's runs: the job, queued or running
    # What the host said on launching (a cluster's job_submit.lua notice on sbatch's
    # stderr), one line, control sequences removed; '' when it said nothing.
    submit_message: str = ""
    # Why the index could not take the launched run (its lock busy 10 s…); '' when it did.
    # The run is running all the same, and its `starting` entry lets the next refresh
    # record it (`runs --discover` finds it in any case).
    unrecorded: str = ""
    # How its dataset went, one line (meter.shipped_words); '' without a dataset.
    dataset: str = ""


class Stored(NamedTuple):
    """A start's dataset in its host's store: the absolute workdir, its SHA-256, and how it
    went in words (meter.shipped_words)."""

    workdir: str
    digest: str
    said: str


# How far a start got on the host (StartTrace.stage), for a caller whose start was
# cancelled or failed: nothing made; a run dir made (removed, or left for the next
# refresh to remove); the launch sent (it may have happened); launched.
NOTHING, CREATED, REMOVED, LEFT, LAUNCHING, LAUNCHED = (
    "nothing", "created", "removed", "left", "launching", "launched")


@dataclass
class StartTrace:
    """What a start has done on the host so far; the engine fills it in as it goes."""

    run_id: str = ""
    run_dir: str = ""
    stage: str = NOTHING

    def left(self, host: str) -> str:
        """What the start left on `host`, in words (the CLI and the TUI add their own hints)."""
        run = self.run_id
        if self.stage == NOTHING:
            return f"no run was created on {host}"
        if self.stage == REMOVED:
            return f"run {run} was removed from {host}, nothing is left of it"
        if self.stage in (CREATED, LEFT):
            where = f" ({self.run_dir})" if self.run_dir else ""
            return (f"run {run}'s directory is left on {host}{where}, never launched; "
                    "the next refresh removes it")
        if self.stage == LAUNCHING:
            return f"run {run} may be running on {host}: it was cancelled as it launched"
        return f"run {run} was launched on {host} and keeps running"


def trainer_command(template: str, python: str, dataset: str | None, gpus: int) -> str:
    """Fill the trainer template; every value is one quoted shell word (see template.py).

    Without a dataset, `{dataset}` and the space before it go, so the default shape
    becomes `... llm --config config.yaml`; nothing else in the template is touched.
    """
    return trainer_template.render(template, python, dataset, gpus)


# What a start records in the run dir for a later resume (core/resume.py reads it back):
# its path, under .rtrain/, apart from what the trainer writes (core/runs/attempt_layout.py).
LAUNCH_JSON = attempt_layout.launch_json()


def launch_json(trainer: str, python: str, dataset: str | None, gpus: int,
                env: dict[str, str], gpu_ids: tuple[int, ...], allow_busy: bool,
                options: object | None, retries: int = 0, retry_base_s: float = 30.0,
                stall: tuple[int, float, str] = (0, 60.0, "warn")) -> str:
    """What a start records in the run dir for a later resume (one line of JSON); a
    resume's attempt keeps the start's `--retries`."""
    return json.dumps({
        "trainer": trainer, "python": python, "dataset": dataset, "gpus": gpus,
        "env": env, "gpu_ids": list(gpu_ids), "allow_busy": allow_busy, "retries": retries,
        "retry_base_s": retry_base_s, "stall_after_s": stall[0], "stall_check_s": stall[1],
        "on_stall": stall[2],
        "options": asdict(options) if options is not None else None,  # type: ignore[call-overload]
    }, sort_keys=True)


def chooses_gpus(req: StartRequest) -> bool:
    """This start picks GPUs (and sets CUDA_VISIBLE_DEVICES) itself."""
    return (req.gpus > 0 or bool(req.gpu_ids)) and "CUDA_VISIBLE_DEVICES" not in req.env


def queues(req: StartRequest) -> bool:
    """This start waits on the host for free GPUs (`--queue`; `--gpus 0` never does)."""
    return req.queue and chooses_gpus(req)


async def write_remote_text(sftp, path: str, text: str | bytes,  # type: ignore[no-untyped-def]
                             mode: int | None = None) -> None:
    """Write a small file under a temp name, then rename it into place; a write the host
    refused (a full disk) takes its temp file away again. With `mode`, the file is
    created with it (a secret's 0600 holds from the first byte, not after a chmod)."""
    import asyncssh  # not at the top: see cli.py's `runs`

    tmp = path + ".part"
    attrs = asyncssh.SFTPAttrs(permissions=mode) if mode is not None else asyncssh.SFTPAttrs()
    try:
        async with sftp.open(tmp, "wb", attrs) as f:
            await f.write(text.encode() if isinstance(text, str) else text)
        await sftp.posix_rename(tmp, path)
    except asyncssh.SFTPError:
        try:
            await sftp.remove(tmp)
        except (asyncssh.SFTPError, RemoteError):
            pass  # never made, or the host refuses that too: the refusal below says why
        raise


async def write_remote_files(sftp, run_dir: str, files: Mapping[str, bytes]) -> None:  # type: ignore[no-untyped-def]
    """A backend's extra launch files (`Backend.launch_files`), each written as above."""
    await together(*(write_remote_text(sftp, f"{run_dir}/{name}", data)
                      for name, data in files.items()))


async def place_when_stored(conn: HostConnection, storing: Awaitable[Stored],
                             name: str, run_dir: str) -> None:
    """Link the dataset into the run dir once `storing` (start.py's store) has it in the store."""
    stored = await storing
    await place_dataset(conn, name, stored.workdir, stored.digest, run_dir)


async def together(*steps: Awaitable[object]) -> None:
    """Run `steps` side by side. The first to fail cancels the others, is waited for with
    them (none is left writing into a run dir being removed), and is raised as it is:
    callers catch RemoteError and asyncssh's errors, never an ExceptionGroup."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()  # a no-op on those that are done
        await asyncio.gather(*tasks, return_exceptions=True)


# -- the stages ------------------------------------------------------------------------
async def checked(ctx: Prober, request: StartRequest
                  ) -> tuple[StartRequest, Backend, BackendOptions | None]:
    """The check stage of a start: `request` validated (ValidationError) and completed from
    the host's config.toml (its backend, that backend's options, retries, stall watch),
    with its backend and options; a broken index refused (IndexCorruptError) before
    anything touches the host."""
    req = request.validated()
    settings = ctx.hosts.for_host(req.host)
    kind = backends.get(req.backend or settings.backend)
    options = kind.options(settings, req.options)
    req = replace(req, trainer=kind.adapt_request(req.trainer, req.gpu_ids, req.allow_busy, options),
                  retries=settings.retries if req.retries is None else req.retries,
                  stall_after_s=settings.stall_after_s if req.stall_after_s is None
                  else req.stall_after_s)
    validate.check_on_stall(req.on_stall, req.retries or 0, req.stall_after_s)
    kind.check_retries(req.retries or 0, req.on_stall, options)
    # Index calls run in a thread: another process holding its lock must never freeze the app.
    await asyncio.to_thread(ctx.index.check)
    return req, kind, options


async def notify_from_host(ctx: Prober, sftp: BoundedSFTP, run_dir: str, spec: LaunchSpec,
                            record: RunRecord, kind: Backend) -> LaunchSpec:
    """`spec` with the events the run's host tells itself (`[notify] on_host`), once its
    run dir holds what it sends them with: notify.pyz and notify.json (the webhook
    URLs: created 0600, never readable by another user for an instant); `spec` as it
    is when the host tells nothing (no URL it can send, a backend that cannot).
    `record` is the run's: its first start (for the elapsed time and the first
    attempt's cost) and the GPUs it holds (for a price per GPU-hour)."""
    config = ctx.hosts
    urls = host_send.host_urls(config.notify_urls(record.host))
    if not (kind.notifies_on_host and config.notify.on_host and urls and config.notify.on):
        return spec
    price = config.price_of(record.host)
    started = run_cost.when(record.started_at)
    settings = host_send.settings(record.host, spec.run_id, urls,
                                  started.timestamp() if started else time.time(),
                                  run_cost.rate_per_hour(price, run_cost.gpus_held(record)) if price else None,
                                  price.currency if price else config.currency)
    await write_remote_text(sftp, f"{run_dir}/{host_send.PROGRAM}", host_files.bundle(*host_send.MODULES))
    await write_remote_text(sftp, f"{run_dir}/{host_send.SETTINGS}", settings, mode=0o600)
    return replace(spec, notify_on=tuple(config.notify.on))


@asynccontextmanager
async def choosing_gpus(ctx: Prober, req: StartRequest, kind: Backend) -> AsyncIterator[HostLock]:
    """Hold the host's GPU-choice lock (a file lock, so it holds across processes too)
    when this start chooses GPUs; a lock that does nothing when it does not."""
    lock = HostLock(gpu_choice_lock(ctx.index, req.host))
    if isinstance(kind, GpuChoice) and chooses_gpus(req) and not queues(req):
        await lock.acquire(GPU_CHOICE_WAIT, f"another start on {req.host} is choosing GPUs")
    try:
        yield lock
    finally:
        lock.release()


async def gpu_env(ctx: Prober, req: StartRequest, step: StepCallback) -> tuple[dict[str, str], str]:
    """The trainer's env with the GPUs it gets, and those GPUs as the index records them.

    CUDA numbers GPUs fastest first unless told PCI_BUS_ID order, which is
    nvidia-smi's: without it `CUDA_VISIBLE_DEVICES=1` could be another GPU than the
    one we saw free. A CUDA_VISIBLE_DEVICES the user set in --env is left alone.
    """
    env = dict(req.env)
    if queues(req):
        # The host chooses when its turn comes; what could never be given (GPU 5 on a
        # box of 2, 4 GPUs of 2, no nvidia-smi) is refused now, not waited for forever.
        step(f"checking the GPUs of {req.host}")
        sample = await ctx.sample_gpus(req.host)
        gpu_choice.choose_gpus(req.host, sample, req.gpus, req.gpu_ids, allow_busy=True)
        return env, ""
    if not chooses_gpus(req):
        return env, ""
    step(f"choosing GPUs on {req.host}")
    sample = await ctx.sample_gpus(req.host, reserve=True, workdir=req.workdir)
    chosen = gpu_choice.choose_gpus(req.host, sample, req.gpus, req.gpu_ids, req.allow_busy)
    ids = ",".join(str(i) for i in chosen)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["CUDA_VISIBLE_DEVICES"] = ids
    return env, ids


async def claim_gpus(conn: HostConnection, kind: GpuChoice, req: StartRequest,
                     run_id: str, gpu_ids: str, again: str = "start") -> None:
    """The claim stage: record the chosen GPUs in the run dir under the host's GPU lock
    (queue.sh's), so a queued run's wrapper, or another laptop, never gets them too;
    refused (GpusBusyError) when one of them was given to a live run of ours since the
    sample, unless the request allows busy GPUs (then it may have chosen one of ours on
    purpose). `again`: the command the refusal tells the user to give again."""
    ids = [int(i) for i in gpu_ids.split(",")]
    facts = dict(probes.parse_key_values(await conn.run(
        kind.claim_script(req.workdir, run_id, ids, share=req.allow_busy))))
    if facts.get("lock_failed"):
        raise RemoteError(f"{req.host}: {safe_line(facts['lock_failed'])[:300]}")
    if facts.get("claimed") != "1":
        held = facts.get("held", "").partition(",")
        raise GpusBusyError(
            f"{req.host}: GPU {held[0] or '?'} was just given to our run {held[2] or '?'}; "
            f"{again} again (or pass --queue to wait for free GPUs).")


async def record_launched(ctx: Prober, record: RunRecord) -> str:
    """Record a launched run's state; '' or why the index would not take it.

    A failure here must not read as "nothing happened": the trainer runs. Its
    `starting` entry is already in the index, so the next refresh records it.
    """
    try:
        await asyncio.to_thread(ctx.index.add, record)
    except IndexBusyError:
        # Not the error's own "try again": starting again would launch a second trainer.
        return (f"{ctx.index.path} stayed locked by another process for "
                f"{ctx.index.lock_timeout:g} s")
    except RemoteError as exc:
        return str(exc)
    return ""


def ship_launch_files(sftp: BoundedSFTP, run_dir: str, kind: Backend, spec: LaunchSpec,
                      name: str) -> list[Awaitable[None]]:
    """The writes that ship a launch: the backend's extra files and its launch file, under
    `name` (a start's is the launch file itself; a resume's waits beside it, named by its
    token, until its claim moves it into place). Awaited side by side (`together`)."""
    return [write_remote_files(sftp, run_dir, kind.launch_files(spec)),
            write_remote_text(sftp, f"{run_dir}/{name}", kind.launch_text(spec))]
