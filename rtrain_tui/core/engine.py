"""The engine: preflight, start, status, refresh and stop, over the shared connections.

The CLI and the TUI both call this and nothing below it. Input is validated by the
caller-facing methods before any connection is opened.

A start is a small transaction: the run enters the index as `starting` before anything
is launched, and while it is in progress the starting process holds a lock file named
by the run's token. A start that fails or is cancelled before its launch removes its run
directory and its entry; one whose launch outcome is unknown (a dropped link, a killed
client) stays `starting` until a refresh, finding the lock free, reads what happened.

How a run is launched, probed and stopped is its backend's (`core/backends/`, the one its
index record names); the engine asks it through `backends.Backend` and names none.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import secrets
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from rtrain_tui.core import backends
from rtrain_tui.core import host as host_files
from rtrain_tui.core import resume as resume_mod
from rtrain_tui.core.backends import Backend, BackendOptions, GpuChoice, LaunchSpec
from rtrain_tui.core.errors import (
    GpusBusyError,
    IndexBusyError,
    NoSuchRunError,
    RemoteError,
    UnreachableError,
)
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.metrics import gpus as gpu_choice
from rtrain_tui.core.notify import host_send, notifier
from rtrain_tui.core.runs import checkpoints as checkpoint_rule
from rtrain_tui.core.runs import cost as run_cost
from rtrain_tui.core.runs import hostconfig, probes
from rtrain_tui.core.runs.index import RunIndex, RunKey, RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.runs.probes import PreflightReport, RunProbe
from rtrain_tui.core.safety import template as trainer_template
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.mask import mask_text, mask_url
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.core.transfers import delta
from rtrain_tui.core.transfers.meter import shipped_words
from rtrain_tui.core.transfers.transfer import (
    Progress,
    RemoteEntry,
    early_command,
    early_store,
    fetch,
    list_tree,
    place_dataset,
    store_dataset,
    upload_file,
)
from rtrain_tui.core.transport import cold_ssh, openssh_pipe
from rtrain_tui.core.transport.bounded import bounded
from rtrain_tui.core.transport.connection import BoundedSFTP, ConnectionPool, HostConnection

StepCallback = Callable[[str], None]
CreatedCallback = Callable[[str, str], None]  # (run id, run dir): the run now exists
CLEANUP_TIMEOUT = 15.0  # a failed start's clean-up on the host never hangs the user
# How long a start waits for another start on the same host to finish choosing GPUs (a
# GPU sample, the run dir, an index write: a second or two, unless that host hangs).
GPU_CHOICE_WAIT = 120.0


class HostProbe(NamedTuple):
    """What one probe of a host told: its runs' probes, a GPU sample, the runs found there."""

    runs: list[RunProbe]
    gpus: gpu_choice.HostGpus | None
    found: list[RunRecord]  # runs started elsewhere, now in the index (`find=True` only)
    # Known runs that ended and went on since (`find=True` with `ended`): (workdir, run id,
    # attempts so far or None).
    went_on: tuple[tuple[str, str, int | None], ...] = ()


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


def _only_short_of_room(report: PreflightReport) -> bool:
    """Whether the disk check is the only reason `report` refuses."""
    return report.reachable and {c.name for c in report.checks if not c.ok and not c.warning} == {"disk"}


def resolved_here(workdir: str) -> str | None:
    """What the host's shell resolves a valid `workdir` to (remote_sh.resolve_workdir),
    when that needs no host: an absolute one is itself, its trailing `/` dropped. None for
    one with `~` or a relative one. A cold start's upload waited for that round trip
    (a new shell session: 50-100 ms) before its first byte."""
    return (workdir.rstrip("/") or "/") if workdir.startswith("/") else None


def _early_workdir(workdir: str) -> bool:
    """Whether a dataset's `ssh` may start before `workdir` is resolved: an absolute one, or
    one under `~` (its host program expands that as the login shell does)."""
    return workdir.startswith(("/", "~/")) or workdir == "~"


def _local_size(*paths: Path | None) -> int:
    """Bytes a start will upload (files that cannot be read fail later, with their own error)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size if path is not None else 0
        except OSError:
            pass
    return total


class Engine:
    def __init__(self, pool: ConnectionPool, index: RunIndex,
                 hosts: hostconfig.HostConfig | None = None) -> None:
        self.pool = pool
        self.index = index
        self._hosts = hosts
        self._workdirs: dict[tuple[str, str], str] = {}
        # Per host: the GPU samples of the last minutes (the host panel's sparklines),
        # and until when sampling is skipped after nvidia-smi timed out there.
        self.gpu_history: dict[str, gpu_choice.GpuHistory] = {}
        self._gpu_quiet_until: dict[str, float] = {}
        # Why each run waits or ended, as the last refresh heard it (a scheduler's reason): the
        # index keeps only the status word, the TUI shows this beside it.
        self.reasons: dict[tuple[str, str, str], str] = {}
        # What refreshes did of their own accord (a run lost to a reboot, resumed), one
        # line each, for the face to show and clear.
        self.notices: list[str] = []
        # Each known run's backend as its index record says ("" = backends.DEFAULT):
        # filled by refresh and start, so a probe need not re-read the index.
        self._kinds: dict[tuple[str, str, str], str] = {}
        # Per host: did its last refresh probe get an answer? (A host whose runs are all
        # settled has no run state to tell it by.)
        self.answered: dict[str, bool] = {}
        self._sending: set[asyncio.Task[None]] = set()  # notifications under way (_tell)

    @property
    def hosts(self) -> hostconfig.HostConfig:
        """Per-host settings (config.toml), read once, when first needed."""
        if self._hosts is None:
            self._hosts = hostconfig.load()
        return self._hosts

    def reload_hosts(self) -> None:
        """Read config.toml again on next use (after the app wrote it)."""
        self._hosts = None

    def backend_of_host(self, host: str) -> str:
        return self.hosts.for_host(host).backend

    def backend_of(self, record: RunRecord) -> str:
        """The backend of `record`'s run (`HostConfig.backend_of`: its own, else what
        an older version that recorded none meant)."""
        return self.hosts.backend_of(record)

    async def _backends(self, host: str, runs: Sequence[tuple[str, str]]) -> list[str]:
        """Each run's backend, as its index record says: fixed when it started, never
        following later changes to the host's config (marking a box as a login node
        must not turn its running runs into `lost` jobs); an empty one as
        `backend_of` reads it. Only a run the index does not know (`status` of a run
        started elsewhere) is taken to be what its host is now.
        """
        # The live file first, then the archives it takes (`find`): `status` of a run
        # need not read a year of them.
        keys = [(host, w, r) for w, r in runs]
        for load in (self.index.load_live, lambda: self.index.find(keys)):
            if all((host, w, r) in self._kinds for w, r in runs):
                break
            try:
                self._kinds.update({rec.key: self.backend_of(rec)
                                    for rec in await asyncio.to_thread(load)})
            except RemoteError:
                break
        kinds = [self._kinds.get((host, w, r)) for w, r in runs]
        default = self.backend_of_host(host) if None in kinds else backends.DEFAULT
        return [default if kind is None else kind for kind in kinds]

    def host(self, alias: str) -> HostConnection:
        try:
            return self.pool.get(validate.check_host(alias))
        except validate.ValidationError:
            # Not a hostname: fine if the ssh config names it (`Host "rented box"`). The
            # config is read only on this rare path, not on every call.
            from rtrain_tui.core.transport.sshconfig import list_hosts

            known = list_hosts(self.pool.ssh_config) if self.pool.ssh_config else []
            return self.pool.get(validate.check_host(alias, known))

    async def close(self) -> None:
        await self.notified()
        await self.pool.close()

    def _tell(self, seen: Sequence[notifier.Seen]) -> None:
        """Send what `seen` calls for in the background: a refresh (the app's next poll)
        never waits on a slow or refusing service. What failed lands in `notices`."""
        if not any(notifier.wanted(s, self.hosts) for s in seen):
            return
        task = asyncio.create_task(self._tell_now(seen))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _tell_now(self, seen: Sequence[notifier.Seen]) -> None:
        try:
            self.notices += await notifier.notify(seen, self.hosts, self._run_on, datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001 - a notification never breaks a refresh
            self.notices.append(mask_text(f"notifications not sent: {' '.join(str(exc).split())}"))

    async def notified(self) -> None:
        """Wait for the notifications under way: a command before it says what failed, or exits."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    async def notify_test_from_host(self, host: str, urls: Sequence[str],
                                    workdir: str = validate.DEFAULT_WORKDIR,
                                    python: str = validate.DEFAULT_PYTHON) -> list[tuple[str, str]]:
        """`notify test HOST`'s second half: the test message sent by `host` itself, by the
        path a run's end takes (notify.pyz in a scratch dir under the workdir, removed after;
        its settings on its stdin). [(each URL the host can send, masked; '' or why not)]."""
        sendable = host_send.host_urls(urls)
        if not sendable:
            return []
        validate.check_workdir(host, workdir)
        conn = self.host(host)
        made = dict(probes.parse_key_values(await conn.run(remote_sh.notify_test_dir(workdir))))
        scratch = made.get("dir", "")
        if not scratch.startswith("/"):
            raise RemoteError(f"{host}: cannot send from it: {made.get('error') or 'no scratch dir made'}.")
        sftp = await conn.sftp()
        await _write_remote_text(sftp, f"{scratch}/{host_send.PROGRAM}", host_files.bundle(*host_send.MODULES))
        # The settings (tokens and all) reach notify.pyz on its stdin, never a file: a file
        # was left on the host by a command killed or timed out before it removed it. On a
        # channel of its own, as the long-lived shell's scripts are `sh -c` arguments (`ps`).
        import asyncssh  # not at the top: see cli.py's `runs`

        ssh = await conn.connect()
        try:
            done = await asyncio.wait_for(ssh.run(
                remote_sh.notify_test_send(scratch, python, host),
                input=host_send.settings(host, "test", sendable, time.time()).decode()),
                host_send.TEST_WITHIN_S + 30)
        except (OSError, TimeoutError, asyncssh.Error) as exc:
            raise RemoteError(f"{host}: no answer from its sender ({str(exc) or 'timed out'}).") from exc
        out = str(done.stdout or "")
        said = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        results = []
        for url in map(mask_url, sendable):
            why = safe_line(said.get(url, "")) or "no answer from the host's sender"  # host text
            results.append((url, "" if why == "arrived" else why[:300]))
        return results

    # -- preflight -------------------------------------------------------------
    async def preflight(
        self, host: str, gpus: int = 1, python: str = validate.DEFAULT_PYTHON,
        workdir: str = validate.DEFAULT_WORKDIR, *, ship_bytes: int = 0,
        backend: str | None = None, options: BackendOptions | None = None,
    ) -> PreflightReport:
        """Is the host ready? `ship_bytes`: what a start will upload, checked against free space.

        `backend` (default: the host's config) and its `options` (default: the host's
        defaults for it) say what is asked of the host.
        """
        validate.check_workdir(host, workdir)
        validate.check_python(python)
        validate.check_gpus(gpus)
        kind = backends.get(backend or self.backend_of_host(host))
        options = kind.options(self.hosts.for_host(host), options)
        script = kind.preflight_script(python, workdir)
        conn = self.host(host)
        conn.retry_now()  # a preflight is always a fresh attempt, never a backed-off one
        try:
            out = await conn.run(script, timeout=30)
        except UnreachableError as exc:
            return PreflightReport(host=host, reachable=False, error=str(exc), backend=kind.name)
        return kind.parse_preflight(host, out, python=python, gpus=gpus, ship_bytes=ship_bytes,
                                    options=options, local=conn.direct is not None)

    # -- start -----------------------------------------------------------------
    async def start(
        self, request: StartRequest, progress: Progress | None = None,
        on_step: StepCallback | None = None, on_created: CreatedCallback | None = None,
        trace: StartTrace | None = None,
    ) -> StartedRun:
        """Preflight, make the run dir, upload, launch; see the module docstring.

        `trace` (optional) is kept up to date with what the start has done on the host,
        so a caller whose start was cancelled can say what is left there.
        """
        trace = trace if trace is not None else StartTrace()
        req = request.validated()
        settings = self.hosts.for_host(req.host)
        kind = backends.get(req.backend or settings.backend)
        options = kind.options(settings, req.options)
        req = replace(req, trainer=kind.adapt_request(req.trainer, req.gpu_ids, req.allow_busy, options),
                      retries=settings.retries if req.retries is None else req.retries,
                      stall_after_s=settings.stall_after_s if req.stall_after_s is None
                      else req.stall_after_s)
        validate.check_on_stall(req.on_stall, req.retries or 0, req.stall_after_s)
        kind.check_retries(req.retries or 0, req.on_stall, options)
        # A broken index is found before anything touches the host. Index calls run in a
        # thread: another process holding its lock must never freeze the app.
        await asyncio.to_thread(self.index.check)
        step = on_step or (lambda _msg: None)
        step(f"preflight {req.host}")
        ship = await asyncio.to_thread(_local_size, req.config, req.dataset)
        # The dataset goes into the host's store while the preflight, the GPU choice and
        # the run dir are under way: its bytes are most of a start's time, and a store
        # entry is only ever verified content, never a run's. A start that fails or is
        # cancelled before it needs the dataset cancels the upload (the host program
        # removes its part file); nothing is launched before the preflight said yes.
        # The dataset's chunk manifest (transfers/delta.py) is written beside placing it
        # and the launch, not before them; the start waits for it only at its end.
        manifests: list[asyncio.Future[None]] = []
        # A new process's big dataset: its `ssh` logs in before asyncssh is even imported.
        cold = await self._cold_bulk(req)
        early: list[asyncio.Future[Any]] = []
        failed = True
        try:
            storing = (asyncio.ensure_future(self._store(req, req.dataset, progress, manifests,
                                                         cold))
                       if req.dataset is not None else None)
            early += [storing] if storing is not None else []
            # The SFTP channel the config and the launch files go over opens meanwhile too
            # (a few round trips of its own).
            opening = asyncio.ensure_future(self.host(req.host).sftp())
            early.append(opening)
            started = await self._start_checked(req, kind, options, ship, storing, opening,
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

    async def _cold_bulk(self, req: StartRequest) -> cold_ssh.Spawned | None:
        """A big dataset's `ssh`, started before this host's connection is made (and so,
        in a new process, before asyncssh is imported: cold_ssh.py); None where not."""
        if req.dataset is None or self.pool.knows(req.host) or not _early_workdir(req.workdir):
            return None
        try:
            if req.dataset.stat().st_size < openssh_pipe.MIN_BYTES:
                return None
            command = early_command(req.dataset, req.workdir, req.python)
        except OSError:
            return None  # the upload says what is wrong with the file
        return await cold_ssh.spawn(self.pool.ssh_config, req.host, command)

    async def _store(self, req: StartRequest, dataset: Path, progress: Progress | None,
                     later: list[asyncio.Future[None]],
                     cold: cold_ssh.Spawned | None = None) -> Stored:
        """Send `dataset` into the store of `req`'s workdir (Stored says where and how).
        A manifest write still under way is appended to `later`. `cold`: its `ssh`,
        started already (cold_ssh.py)."""
        began = time.monotonic()
        conn = self.host(req.host)
        # A big dataset's own `ssh` logs in while the workdir is resolved, not after: the
        # host program expands a leading `~` itself (the default workdir has one).
        early = (await early_store(conn, dataset, req.workdir, req.python, cold)
                 if _early_workdir(req.workdir) else None)
        try:
            workdir = await self._workdir_path(req.host, req.workdir)
            shipped = await store_dataset(conn, dataset, workdir, progress,
                                          python=req.python, later=later, early=early)
        finally:
            if early is not None:
                await early.close()  # a no-op once the upload took it
        return Stored(workdir, shipped.digest, shipped_words(  # the size the upload read
            dataset.name, shipped.size, shipped.how, shipped.wire, time.monotonic() - began,
            req.host))

    async def _start_checked(
        self, req: StartRequest, kind: Backend, options: BackendOptions | None, ship: int,
        storing: asyncio.Future[Stored] | None, opening: asyncio.Future[BoundedSFTP],
        progress: Progress | None, step: StepCallback, on_created: CreatedCallback | None,
        trace: StartTrace,
    ) -> StartedRun:
        """The start from its preflight on (see `start`); `storing` sends the dataset,
        `opening` opens the SFTP channel."""
        report = await self.preflight(req.host, req.gpus, req.python, req.workdir,
                                      ship_bytes=ship, backend=kind.name, options=options)
        if not report.ok and storing is not None and _only_short_of_room(report):
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
        async with self._choosing_gpus(req, kind) as chosen:
            # Where the client does not choose GPUs (a scheduler hands them out), the
            # trainer's env is the request's.
            env, gpu_ids = (await self._gpu_env(req, step) if isinstance(kind, GpuChoice)
                            else (dict(req.env), ""))
            # The host chooses a queued run's GPUs, when its turn comes.
            queue = ((req.gpus, req.gpu_ids) if _queues(req) and isinstance(kind, GpuChoice)
                     else None)
            conn = self.host(req.host)
            token = secrets.token_hex(16)
            nodes, per_node = kind.placement(req.gpus, options)
            with self._starting(token):
                def starting(run_id: str) -> RunRecord:
                    return RunRecord(
                        host=req.host, run_id=run_id, workdir=req.workdir, python=req.python,
                        state=probes.STARTING, started_at=index_now(), updated_at=index_now(),
                        config=str(req.config), dataset=str(req.dataset or ""), gpus=per_node,
                        token=token, gpu_ids=gpu_ids, backend=kind.name, nodes=nodes,
                    )

                run_id, run_dir = await self._make_run_dir(conn, req, token, starting, trace)
                record = starting(run_id)
                self._kinds[record.key] = record.backend
                launching = False
                try:
                    if gpu_ids and isinstance(kind, GpuChoice):
                        await self._claim_gpus(conn, kind, req, run_id, gpu_ids)
                    await asyncio.to_thread(self.index.add, record)
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
                    spec = await self._notify_from_host(sftp, run_dir, spec, record, kind)
                    # What was launched, for a later resume (core/resume.py): the user's env,
                    # not the GPUs chosen now; a resume chooses them again.
                    launched_as = resume_mod.launch_json(
                        req.trainer, req.python, dataset_name, req.gpus, dict(req.env),
                        req.gpu_ids, req.allow_busy, options, retries=req.retries or 0,
                        retry_base_s=spec.retry_base_s, stall=(spec.stall_after_s,
                                                               spec.stall_check_s, spec.on_stall))
                    # The config, the launch files and the dataset (once it is stored: a big
                    # one still arrives) side by side: each is a few round trips, which add
                    # up on a distant host.
                    await _together(
                        upload_file(conn, sftp, req.config, f"{run_dir}/config.yaml", progress),
                        _write_remote_files(sftp, run_dir, kind.launch_files(spec)),
                        _write_remote_text(sftp, f"{run_dir}/{kind.launch_file}", kind.launch_text(spec)),
                        _write_remote_text(sftp, f"{run_dir}/{resume_mod.LAUNCH_JSON}", launched_as),
                        *([] if storing is None or dataset_name is None else
                          [_place_when_stored(conn, storing, dataset_name, run_dir)]))
                    step(kind.launch_step)
                    launching, trace.stage = True, LAUNCHING
                    out = dict(probes.parse_key_values(await conn.run(kind.launch_script(run_dir, token))))
                except BaseException:
                    if not launching:
                        await self._abandon(conn, record, trace)
                    # Else the launch may or may not have happened: the entry stays
                    # `starting` and the next refresh reads the truth from the host.
                    raise
                if "error" in out:
                    await self._abandon(conn, record, trace)
                    raise RemoteError(f"{req.host}: the run did not launch ({out['error']}).")
                trace.stage = LAUNCHED
                launched = kind.launched(req.host, run_id, out)
                if queue is not None:  # its wrapper lives, waiting in the host's queue
                    launched = replace(launched, state=probes.QUEUED)
                record = replace(record, state=launched.state, updated_at=index_now(),
                                 job_id=launched.job_id)
                unrecorded = await self._record_launched(record)
            # Placed in the run dir above, so stored by now.
            said = storing.result().said if storing is not None and storing.done() else ""
            return StartedRun(req.host, run_id, run_dir, launched.pid, record, job_id=launched.job_id,
                              submit_message=launched.message, unrecorded=unrecorded,
                              dataset=said)

    async def _notify_from_host(self, sftp: BoundedSFTP, run_dir: str, spec: LaunchSpec,
                                record: RunRecord, kind: Backend) -> LaunchSpec:
        """`spec` with the events the run's host tells itself (`[notify] on_host`), once its
        run dir holds what it sends them with: notify.pyz and notify.json (the webhook
        URLs: created 0600, never readable by another user for an instant); `spec` as it
        is when the host tells nothing (no URL it can send, a backend that cannot).
        `record` is the run's: its first start (for the elapsed time and the first
        attempt's cost) and the GPUs it holds (for a price per GPU-hour)."""
        config = self.hosts
        urls = host_send.host_urls(config.notify_urls(record.host))
        if not (kind.notifies_on_host and config.notify.on_host and urls and config.notify.on):
            return spec
        price = config.price_of(record.host)
        started = run_cost.when(record.started_at)
        settings = host_send.settings(record.host, spec.run_id, urls,
                                      started.timestamp() if started else time.time(),
                                      run_cost.rate_per_hour(price, run_cost.gpus_held(record)) if price else None,
                                      price.currency if price else config.currency)
        await _write_remote_text(sftp, f"{run_dir}/{host_send.PROGRAM}", host_files.bundle(*host_send.MODULES))
        await _write_remote_text(sftp, f"{run_dir}/{host_send.SETTINGS}", settings, mode=0o600)
        return replace(spec, notify_on=tuple(config.notify.on))

    @asynccontextmanager
    async def _choosing_gpus(self, req: StartRequest, kind: Backend) -> AsyncIterator[_HostLock]:
        """Hold the host's GPU-choice lock (a file lock, so it holds across processes too)
        when this start chooses GPUs; a lock that does nothing when it does not."""
        lock = _HostLock(_gpu_choice_lock(self.index, req.host))
        if isinstance(kind, GpuChoice) and _chooses_gpus(req) and not _queues(req):
            await lock.acquire(GPU_CHOICE_WAIT, f"another start on {req.host} is choosing GPUs")
        try:
            yield lock
        finally:
            lock.release()

    async def _gpu_env(self, req: StartRequest, step: StepCallback) -> tuple[dict[str, str], str]:
        """The trainer's env with the GPUs it gets, and those GPUs as the index records them.

        CUDA numbers GPUs fastest first unless told PCI_BUS_ID order, which is
        nvidia-smi's: without it `CUDA_VISIBLE_DEVICES=1` could be another GPU than the
        one we saw free. A CUDA_VISIBLE_DEVICES the user set in --env is left alone.
        """
        env = dict(req.env)
        if _queues(req):
            # The host chooses when its turn comes; what could never be given (GPU 5 on a
            # box of 2, 4 GPUs of 2, no nvidia-smi) is refused now, not waited for forever.
            step(f"checking the GPUs of {req.host}")
            sample = await self.sample_gpus(req.host)
            gpu_choice.choose_gpus(req.host, sample, req.gpus, req.gpu_ids, allow_busy=True)
            return env, ""
        if not _chooses_gpus(req):
            return env, ""
        step(f"choosing GPUs on {req.host}")
        sample = await self.sample_gpus(req.host, reserve=True, workdir=req.workdir)
        chosen = gpu_choice.choose_gpus(req.host, sample, req.gpus, req.gpu_ids, req.allow_busy)
        ids = ",".join(str(i) for i in chosen)
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        env["CUDA_VISIBLE_DEVICES"] = ids
        return env, ids

    async def _claim_gpus(self, conn: HostConnection, kind: GpuChoice, req: StartRequest,
                          run_id: str, gpu_ids: str) -> None:
        """Record the chosen GPUs in the run dir under the host's GPU lock (queue.sh's),
        so a queued run's wrapper, or another laptop, never gets them too; refused when
        one of them was given to a live run of ours since the sample, unless the start
        allows busy GPUs (then it may have chosen one of ours on purpose)."""
        ids = [int(i) for i in gpu_ids.split(",")]
        facts = dict(probes.parse_key_values(await conn.run(
            kind.claim_script(req.workdir, run_id, ids, share=req.allow_busy))))
        if facts.get("lock_failed"):
            raise RemoteError(f"{req.host}: {safe_line(facts['lock_failed'])[:300]}")
        if facts.get("claimed") != "1":
            held = facts.get("held", "").partition(",")
            raise GpusBusyError(
                f"{req.host}: GPU {held[0] or '?'} was just given to our run {held[2] or '?'}; "
                "start again (or pass --queue to wait for free GPUs).")

    @contextmanager
    def _starting(self, token: str) -> Iterator[None]:
        """Hold the lock that says "a start of this run is in progress" (see the docstring)."""
        path = _starting_lock(self.index, token)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                path.unlink(missing_ok=True)

    async def _abandon(self, conn: HostConnection, record: RunRecord, trace: StartTrace,
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
                await asyncio.to_thread(self.index.remove, record.key)
            else:  # not removed (unreachable, or no longer ours to remove): refresh decides
                trace.stage = LEFT
                if not recorded:
                    await asyncio.to_thread(self.index.add_new, [record])
        except RemoteError:
            pass  # a busy index: an entry left `starting` is settled by a refresh

    async def _record_launched(self, record: RunRecord) -> str:
        """Record a launched run's state; '' or why the index would not take it.

        A failure here must not read as "nothing happened": the trainer runs. Its
        `starting` entry is already in the index, so the next refresh records it.
        """
        try:
            await asyncio.to_thread(self.index.add, record)
        except IndexBusyError:
            # Not the error's own "try again": starting again would launch a second trainer.
            return (f"{self.index.path} stayed locked by another process for "
                    f"{self.index.lock_timeout:g} s")
        except RemoteError as exc:
            return str(exc)
        return ""

    async def _make_run_dir(self, conn: HostConnection, req: StartRequest, token: str,
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
                await self._abandon(conn, starting(run_id), trace, recorded=False)
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

    # -- status ----------------------------------------------------------------
    async def probe(self, host: str, workdir: str, run_id: str) -> RunProbe:
        validate.check_run_id(run_id)
        validate.check_workdir(host, workdir)
        return (await self.probe_many(host, [(workdir, run_id)]))[0]

    async def require_run(self, host: str, workdir: str, run_id: str) -> RunProbe:
        """The run's probe; `NoSuchRunError` when the host has no such run directory.

        Asked before acting on a run the user named, so a typo in the id reads as one,
        not as `unknown`, `was not running` or a missing file.
        """
        found = await self.probe(host, workdir, run_id)
        if not found.exists:
            raise NoSuchRunError(
                f"no run {run_id} on {host} (nothing at {workdir.rstrip('/')}/{run_id}); "
                "`rtrain-tui runs` lists the known runs.")
        return found

    async def probe_many(self, host: str, runs: Sequence[tuple[str, str]],
                         need_end: Collection[int] = ()) -> list[RunProbe]:
        """One script for every run on the host: one round trip, however many runs.

        Runs at the positions in `need_end` also report when they ended, if they have.
        """
        return (await self.probe_host(host, runs, need_end))[0]

    async def probe_host(
        self, host: str, runs: Sequence[tuple[str, str]], need_end: Collection[int] = (),
        gpus: bool = False, kinds: Sequence[str] | None = None, find: bool = False,
        known: Sequence[tuple[str, str]] | None = None,
        ended: Mapping[tuple[str, str], tuple[int, int]] | None = None, add_found: bool = True,
    ) -> HostProbe:
        """The runs' probes and, with `gpus`, a GPU sample: one script per backend.

        `kinds` (each run's backend; default: from the index, else the host's config)
        picks the scripts, sent in the backends' order: the GPU sample shares a round
        trip with the runs of the backend that chooses GPUs (a box's), each other backend
        with runs there takes one more. After nvidia-smi timed out on a host, its GPUs are
        not sampled for a minute: a wedged driver must not slow every refresh by the timeout.

        With `find`, the first script also lists the host's workdirs (the default one and
        those of `runs`) for run directories that `runs` lack, the newest
        `remote_sh.FIND_LIMIT` names of each: no extra round trip when nothing new is
        there; when something is, one more probes it and it joins the index as `found`
        (see `_add_found`). A failure of that part leaves the probes above standing.
        `known` (default: `runs`) are the runs the listing is told the host has; `ended`
        gives the recorded end (epoch, the host's clock) of those that ended, and the
        listing tells which of them went on since (`went_on`: its end mark was written
        again, or moved away by a resume or the host's retry; only the newest ends of a
        workdir are told, see `_told`). Without `add_found` the
        runs found are left out of the index (`runs --refresh` looks only at its own).
        """
        if kinds is None:
            kinds = await self._backends(host, runs)
        gpus = gpus and time.monotonic() >= self._gpu_quiet_until.get(host, 0.0)
        results: list[RunProbe | None] = [None] * len(runs)
        sample = None
        told, untold = (self._told(host, runs if known is None else known, ended or {},
                                   remote_sh.FIND_LIMIT) if find else ([], set()))
        workdirs, listing = (self._find_script(host, told, remote_sh.FIND_LIMIT, ended)
                             if find else ([], ""))
        listed = ""
        chooser = backends.gpu_chooser()
        wanted = set(need_end)
        for kind in backends.all_backends():
            mine = [i for i, k in enumerate(kinds) if (k or backends.DEFAULT) == kind.name]
            # The GPU sample, and a listing with no runs to ride with, go with the chooser's.
            if not mine and not (kind is chooser and (gpus or not runs)):
                continue
            ends = [j for j, i in enumerate(mine) if i in wanted]
            part = [runs[i] for i in mine]
            with_gpus = gpus and kind is chooser
            script = chooser.probe_with_gpus(part, ends) if with_gpus else kind.probe_script(part, ends)
            out = await self.host(host).run(listing + script)
            listed, listing = listed or out, ""  # the listing rides with the first script only
            for i, probe in zip(mine, kind.parse_probe(out, len(mine), host)):
                results[i] = probe
            if with_gpus:
                sample = gpu_choice.parse_gpu_sample(out)
                if sample.timed_out:
                    self._gpu_quiet_until[host] = time.monotonic() + 60.0
        added: list[RunRecord] = []
        went: tuple[tuple[str, str, int | None], ...] = ()
        if find:
            went = tuple((workdirs[w.workdir], w.run_id, w.attempts)
                         for w in probes.parse_went_on(listed, len(workdirs)))
            if untold:
                # An ended run it was not told of, yet among the newest names: its run dir
                # changed after newer ends, so it may have gone on; probed again to know.
                seen = probes.parse_found_runs(listed, len(workdirs))[1]
                went += tuple((workdirs[f.workdir], f.run_id, None) for f in seen
                              if (self._place(host, workdirs[f.workdir]), f.run_id) in untold)
            try:
                added = await self._add_found(host, workdirs, listed, add=add_found)
            except RemoteError:
                pass  # the runs' probes stand; the next probe looks again
        return HostProbe([p or RunProbe(exists=False) for p in results], sample, added, went)

    def _place(self, host: str, workdir: str) -> str:
        """Where `workdir` resolved on `host` last time (itself until then), so that
        `~/x` and `/home/me/x` are one place."""
        return self._workdirs.get((host, workdir), workdir)

    def _told(self, host: str, known: Sequence[tuple[str, str]],
              ended: Mapping[tuple[str, str], int | tuple[int, int]], limit: int
              ) -> tuple[list[tuple[str, str]], set[tuple[str, str]]]:
        """The known runs a listing of the newest `limit` names of each workdir is told of,
        and the places (resolved workdir, run id) of those it is not.

        A run dir's time is about its run's end (its end mark is written there), so of
        the ended runs of a workdir only the `limit` with the newest recorded ends can be
        among the names looked at; a year of runs is not sent, and compared, each refresh.
        The runs that did not end are always told. One not told that is listed anyway
        (a resume or retry moved its dir's time) is probed again, as one that went on."""
        by_place: dict[str, list[tuple[int, tuple[str, str]]]] = {}
        for run in known:
            if run in ended:
                end = ended[run]
                by_place.setdefault(self._place(host, run[0]), []).append(
                    (end[0] if isinstance(end, tuple) else end, run))
        left: set[tuple[str, str]] = set()
        for ends in by_place.values():
            if len(ends) > limit:
                ends.sort(reverse=True)
                left.update(run for _, run in ends[limit:])
        if not left:
            return list(known), set()
        return ([r for r in known if r not in left],
                {(self._place(host, w), r) for w, r in left})

    def _find_script(self, host: str, runs: Sequence[tuple[str, str]], limit: int | None,
                     ended: Mapping[tuple[str, str], tuple[int, int]] | None = None
                     ) -> tuple[list[str], str]:
        """The workdirs to list on `host` (the default one and those of `runs`) and the
        `find_runs` script that lists them, told the names `runs` has in each (and the
        end `ended` records for them). A workdir is matched by where it resolved last
        time, so `~/x` and `/home/me/x` share them."""
        workdirs = list(dict.fromkeys([validate.DEFAULT_WORKDIR, *(w for w, _ in runs)]))
        names: dict[str, set[str]] = {}
        ends: dict[str, dict[str, int | tuple[int, int]]] = {}
        for workdir, run_id in runs:
            names.setdefault(self._place(host, workdir), set()).add(run_id)
            if ended and (workdir, run_id) in ended:
                ends.setdefault(self._place(host, workdir), {})[run_id] = ended[(workdir, run_id)]
        known = [names.get(self._place(host, w), set()) for w in workdirs]
        return workdirs, remote_sh.find_runs(workdirs, known, limit,
                                             [ends.get(self._place(host, w), {}) for w in workdirs])

    async def _add_found(self, host: str, workdirs: Sequence[str], out: str,
                         add: bool = True) -> list[RunRecord]:
        """Add to the index the runs a `find_runs` listing shows that it lacks; returns them.

        Nothing listed: nothing read, no round trip. Else the index is read again (a run
        started here since the listing is known, not found), the unknown runs probed in
        one round trip and each recorded with its state and start time, marked
        `origin = "found"`. Known runs are matched by their resolved directory, so `~/x`
        and `/home/me/x` are one place. Without `add`, only the workdirs' places are kept.
        """
        resolved, found = probes.parse_found_runs(out, len(workdirs))
        for i, path in resolved.items():
            self._workdirs[(host, workdirs[i])] = path  # what run_dir() would resolve
        if not found or not add:
            return []
        mine = [r for r in await asyncio.to_thread(self.index.load) if r.host == host]
        # A run recorded since the listing, in a workdir it did not cover: where that
        # workdir lies is not known yet, so its id waits for the next listing.
        unsure = {r.run_id for r in mine if (host, r.workdir) not in self._workdirs}
        known = {(self._workdirs.get((host, r.workdir)), r.run_id) for r in mine}
        new: list[tuple[str, probes.FoundRun]] = []
        for f in found:
            place = (resolved.get(f.workdir), f.run_id)
            if (place[0] is None or place in known or f.run_id in unsure
                    or not _usable_run_id(f.run_id)):
                continue
            known.add(place)  # the same directory under two spellings counts once
            new.append((workdirs[f.workdir], f))
        if not new:
            return []
        probed = await self.probe_many(host, [(wd, f.run_id) for wd, f in new], range(len(new)))
        now = index_now()
        # Probed (above) as the host is configured now, as any run the index lacks; from
        # here on that backend is the run's own, whatever config.toml says later.
        backend = self.backend_of_host(host)
        candidates = [
            RunRecord(host, f.run_id, wd, state=p.state, started_at=_epoch_iso(f.started),
                      updated_at=now, origin="found", backend=backend,
                      ended_at=_epoch_iso(p.ended_at) if probes.is_final(p.state) else "")
            for (wd, f), p in zip(new, probed) if p.exists
        ]
        # Oldest first, as runs started here join the index (the listing is newest first).
        candidates.sort(key=lambda r: r.started_at)
        return await asyncio.to_thread(self.index.add_new, candidates)

    def _remember_gpus(self, host: str, sample: gpu_choice.HostGpus,
                       records: Sequence[RunRecord], found: Sequence[RunProbe]) -> gpu_choice.HostGpus:
        """Name our runs' GPU processes and add the sample to the host's history."""
        tokens, groups = gpu_choice.run_maps(
            (r.run_id, r.token, p.pid if p.alive else None) for r, p in zip(records, found))
        sample = sample.with_runs(tokens, groups)
        self.gpu_history.setdefault(host, gpu_choice.GpuHistory()).add(sample)
        return sample

    async def poll_gpus(self, host: str) -> gpu_choice.HostGpus | None:
        """The refresh probe's GPU report alone, for a host with no runs (the host panel)."""
        probe = await self.probe_host(host, [], gpus=True)
        return None if probe.gpus is None else self._remember_gpus(host, probe.gpus, [], probe.runs)

    async def sample_gpus(self, host: str, reserve: bool = False,
                          workdir: str | None = None) -> gpu_choice.HostGpus:
        """Sample the host's GPUs now, naming the processes of the runs the index has there.

        One round trip, and slower than a refresh's GPU report (it waits for nvidia-smi).
        With `reserve`, the GPUs given to our runs that are alive, or whose start is in
        progress, are marked taken: a trainer loading its model is not in nvidia-smi yet;
        so are those the host records as given to our live runs under `workdir` (the
        `gpus` file in each run dir: queued runs get theirs on the host, from any client).
        """
        try:
            # The live file's runs: an ended (archived) run holds no GPU and no process,
            # and a start need not read a year of archives.
            records = [r for r in await asyncio.to_thread(self.index.load_live) if r.host == host]
        except RemoteError:
            records = []  # a broken index only costs the run names
        # Sampled now, not read from the background sample: a start must not choose by
        # a sample from before another run took a GPU.
        runs = [(r.workdir, r.run_id) for r in records]
        chooser = backends.gpu_chooser()
        out = await self.host(host).run(chooser.sample_now_script(runs, workdir))
        found = chooser.parse_probe(out, len(runs), host)
        sample = self._remember_gpus(host, gpu_choice.parse_gpu_sample(out), records, found)
        if not reserve:
            return sample
        taken = tuple(
            (int(i), r.run_id) for r, p in zip(records, found) if r.gpu_ids
            and (p.alive or (r.state == probes.STARTING and _start_in_progress(self.index, r.token)))
            for i in r.gpu_ids.split(",") if i.isdigit())
        return replace(sample, reserved=taken + gpu_choice.parse_held(out))

    async def refresh(self, records: Sequence[RunRecord] | None = None,
                      sample_gpus: bool = False,
                      on_found: Callable[[str, list[RunRecord]], None] | None = None,
                      *, all_runs: bool = False,
                      went_on: bool = False) -> dict[tuple[str, str, str], str]:
        """Update the index from the hosts, all hosts at once, one probe per host.

        Final is final: a run `settled` (see there) is not probed again, so a refresh
        costs the live runs, not a year of ended ones; `all_runs` probes every run all
        the same (`runs --refresh --all`; `status HOST RUN` always asks the host).

        With `sample_gpus`, each host's probe also samples its GPUs into `gpu_history`.
        With `on_found`, each host's probe also lists its workdirs (`probe_host(find=True)`);
        the runs started elsewhere join the index and are passed to `on_found(host, runs)`.
        That listing (or, with `went_on`, the listing alone: `runs --refresh`) also tells
        which settled runs went on after their recorded end, and those are probed in one
        more round trip: a run resumed from another laptop, or retried by its host, is
        never `failed` here forever (only the newest names of a workdir are looked at;
        a resume moves its run dir's time there). A host whose runs are all settled is
        still asked for those; whether it answered is in `answered`.

        Returns {record key: state} for the runs it probed; a host that cannot be reached
        yields `unreachable` for its runs, whose last known state stays in the index,
        stale. A state that changed after this refresh began (a stop's verdict) is kept.
        """
        observed_at = index_now()
        records = list(await asyncio.to_thread(self.index.load) if records is None else records)
        by_host: dict[str, list[RunRecord]] = {}
        # The listing is told every run the host has, probed or not: a settled run is
        # known, never "found" again; with its end, so that one that went on is seen.
        listed: dict[str, list[tuple[str, str]]] = {}
        rest: dict[str, list[RunRecord]] = {}  # the settled runs, not probed
        listing = on_found is not None or went_on
        for rec in records:
            listed.setdefault(rec.host, []).append((rec.workdir, rec.run_id))
            if all_runs or not settled(rec):
                by_host.setdefault(rec.host, []).append(rec)
            else:
                rest.setdefault(rec.host, []).append(rec)
                if sample_gpus or listing:
                    by_host.setdefault(rec.host, [])

        ended: dict[tuple[str, str, str], str] = {}
        rebooted: list[tuple[str, str, str]] = []  # lost to a reboot: retried below
        forget: dict[tuple[str, str, str], str] = {}  # unlaunched starts the host removed
        went: dict[tuple[str, str, str], int] = {}  # settled runs that went on: attempts
        running: dict[tuple[str, str, str], tuple[int, str, int | None]] = {}  # attempts' launch times
        resolved: dict[tuple[str, str, str], str] = {}  # backends to record (older entries)
        seen: list[notifier.Seen] = []  # what notifications look at (core/notify)

        async def one_host(host: str, recs: list[RunRecord]) -> dict[tuple[str, str, str], str]:
            # Which `starting` entries had no start in progress before the probe was sent:
            # only a probe taken after its start was over can tell that it never launched.
            over = {r.key for r in recs if r.state == probes.STARTING
                    and not _start_in_progress(self.index, r.token)}
            try:
                kinds = {r.key: self.backend_of(r) for r in recs}
                self._kinds.update(kinds)  # probe_many reads them
                # A found run an older version recorded with no backend gets the one it
                # is probed as written down, so a later change of config.toml cannot move it.
                resolved.update({r.key: kinds[r.key] for r in recs if not r.backend and r.origin == "found"})
                runs = [(r.workdir, r.run_id) for r in recs]
                need_end = [i for i, r in enumerate(recs) if not r.ended_at]
                added: list[RunRecord] = []
                if sample_gpus or listing:
                    # With its attempts: a resume in the second it ended is told by them.
                    ends = {(r.workdir, r.run_id): (e, r.attempt) for r in rest.get(host, ())
                            if listing and (e := _iso_epoch(r.ended_at)) is not None}
                    found, sample, added, moved = await self.probe_host(
                        host, runs, need_end, gpus=sample_gpus, find=listing,
                        known=listed[host], ended=ends, add_found=on_found is not None)
                    again = self._went_on(host, rest.get(host, ()), moved)
                    if again and (probed := await self._probe_again(host, [r for r, _ in again])):
                        recs, found = recs + [r for r, _ in again], found + probed
                        went.update({r.key: n for r, n in again})
                else:  # probe_many is the seam fault tests slow down; keep going through it
                    found, sample = await self.probe_many(host, runs, need_end), None
            except RemoteError:
                self.answered[host] = False
                return {r.key: probes.UNREACHABLE for r in recs}
            self.answered[host] = True
            if added and on_found is not None:
                on_found(host, added)
            if sample is not None:
                self._remember_gpus(host, sample, recs, found)
            states = {}
            for r, p in zip(recs, found):
                if p.ended_at is not None and probes.is_final(p.state):
                    ended[r.key] = datetime.fromtimestamp(p.ended_at, UTC).isoformat()
                running.update(_running(r.key, p))
                if p.reason:
                    self.reasons[r.key] = p.reason
                else:
                    self.reasons.pop(r.key, None)
                if p.rebooted and p.state == probes.LOST:
                    rebooted.append(r.key)
                if r.state != probes.STARTING:
                    seen.append(notifier.Seen(r, p.state, p.stalled_for, p.reason, ended.get(r.key, "")))
                if r.state != probes.STARTING:
                    states[r.key] = p.state
                elif r.key not in over:
                    states[r.key] = probes.STARTING  # this probe may predate the launch
                else:
                    states[r.key] = await self._settle_start(r, p)
                    if states[r.key] == _FORGOTTEN:
                        forget[r.key] = r.token
                        states[r.key] = probes.UNKNOWN
            return states

        results: dict[tuple[str, str, str], str] = {}
        for part in await asyncio.gather(*(one_host(h, rs) for h, rs in by_host.items())):
            results.update(part)
        now = index_now()
        await asyncio.to_thread(
            self.index.set_states,
            {k: (s, s == probes.UNREACHABLE, now) for k, s in results.items()
             if s != probes.STARTING and k not in forget},
            observed_at=observed_at, ended=ended, forget=forget, backends=resolved, went_on=went,
            running=running,
        )
        # Before a reboot's retry: the loss is a transition of its attempt all the same.
        self._tell(seen)
        for key in rebooted:
            if results.get(key) == probes.LOST:
                await self._retry_after_reboot(key, results)
        return results

    async def _run_on(self, host: str, script: str) -> str:
        return await self.host(host).run(script)

    async def _retry_after_reboot(self, key: tuple[str, str, str],
                                  results: dict[tuple[str, str, str], str]) -> None:
        """A run lost to a reboot with retries left is resumed (the wrapper that would have
        retried it died with the host); says so in `notices`. Another client resuming it
        at the same time takes the attempt once (the host's claim); this one then says
        nothing."""
        host, workdir, run_id = key
        try:
            got = await resume_mod.retry_after_reboot(self, host, workdir, run_id)
        except (RemoteError, validate.ValidationError):
            return
        if got is not None:
            results[key] = got.started.record.state
            self.reasons.pop(key, None)
            self.notices.append(
                f"{run_id} on {host} was lost to a reboot of the host; resumed it: attempt "
                f"{got.attempt}, {'from ' + got.checkpoint if got.checkpoint else 'from the start'}")

    def _went_on(self, host: str, rest: Sequence[RunRecord],
                 moved: Sequence[tuple[str, str, int | None]]) -> list[tuple[RunRecord, int]]:
        """The settled records of `host` that a listing said went on (`HostProbe.went_on`),
        each with its count of attempts (its own where the host did not say)."""
        if not moved:
            return []
        places = {(self._place(host, w), r): n for w, r, n in moved}
        out = []
        for rec in rest:
            place = (self._place(host, rec.workdir), rec.run_id)
            if place in places:
                out.append((rec, places[place] or rec.attempt))
        return out

    async def _probe_again(self, host: str, recs: Sequence[RunRecord]) -> list[RunProbe]:
        """Probe settled runs that went on, asking when they ended: one round trip. A host
        that does not answer now leaves them as they were; the next listing sees them again."""
        self._kinds.update({r.key: self.backend_of(r) for r in recs})
        try:
            return await self.probe_many(host, [(r.workdir, r.run_id) for r in recs], range(len(recs)))
        except RemoteError:
            return []

    async def discover(self, host: str) -> list[RunRecord]:
        """Add to the index the runs on `host` it does not know; returns those added.

        Runs started elsewhere — by `praisonai train remote`, from another laptop, by a
        teammate on the same account — live in the same run directories. The default
        workdir and every workdir the index has for the host are listed in one round
        trip, the unknown runs probed in one more; each is recorded with its state and
        start time and marked `origin = "found"`. Known runs are matched by their
        resolved directory, so `~/x` and `/home/me/x` are one place. Asked for, so every
        name is looked at (the app's refresh looks at the newest ones only).
        """
        records = await asyncio.to_thread(self.index.load)
        runs = [(r.workdir, r.run_id) for r in records if r.host == host]
        workdirs, script = self._find_script(host, runs, limit=None)
        return await self._add_found(host, workdirs, await self.host(host).run(script))

    async def _settle_start(self, record: RunRecord, probe: RunProbe) -> str:
        """The true state of a `starting` entry whose start was over before `probe` was
        taken (a probe from before could predate the launch).

        Launched: whatever the host says. Never launched: its start died (a killed
        client) or was cut off, so its run dir is removed; `_FORGOTTEN` (the entry is to
        go) only once the host said it removed it, or that there is none. Else it stays
        `starting`, and the next refresh looks again.
        """
        if _start_in_progress(self.index, record.token):
            return probes.STARTING
        if probe.launched:
            if record.attempt > 1:
                await self._settle_attempt(record)
            return probe.state
        if not record.token:  # written before starts had tokens: nothing to match on the
            return _FORGOTTEN  # host, so its dir is left there, as it always was
        try:
            out = await self.host(record.host).run(
                remote_sh.remove_unlaunched(record.workdir, record.run_id, record.token))
        except RemoteError:
            return probes.STARTING  # try again next refresh
        removed = dict(probes.parse_key_values(out)).get("removed")
        if removed == "kept":
            # A resume's attempt, claimed and never launched (core/resume.py): the run and
            # its attempts stay; it reads as what the host says (`unknown`), and `resume`
            # takes it again.
            return probe.state
        return _FORGOTTEN if removed in ("1", "gone") else probes.STARTING

    async def _settle_attempt(self, record: RunRecord) -> None:
        """A resume's entry, launched: its claim may never have reached the host (the
        resume was cut off before it, and attempt 1's pid file says launched), so the
        index keeps the host's count of attempts, not the one it was about to claim."""
        try:
            out = await self.host(record.host).run(
                remote_sh.resume_facts(record.workdir, record.run_id))
        except RemoteError:
            return  # the count stays; the state is read as ever
        said = dict(probes.parse_key_values(out)).get("attempts", "")
        if not (said.isdigit() and len(said) < 6) or int(said) == record.attempt:
            return
        attempt = int(said)
        await asyncio.to_thread(self.index.update, lambda runs: [
            replace(r, attempt=attempt) if r.key == record.key and r.token == record.token
            else r for r in runs])

    # -- workdir ---------------------------------------------------------------
    async def run_dir(self, host: str, workdir: str, run_id: str) -> str:
        """The run dir as an absolute path on the host (SFTP does not expand `~`)."""
        validate.check_run_id(run_id)
        return f"{await self._workdir_path(host, workdir)}/{run_id}"

    async def _workdir_path(self, host: str, workdir: str) -> str:
        """The workdir as an absolute path on the host, asked once per engine (an
        absolute one needs no asking: resolved_here)."""
        key = (host, validate.check_workdir(host, workdir))
        if key not in self._workdirs and (here := resolved_here(workdir)) is not None:
            self._workdirs[key] = here
        if key not in self._workdirs:
            out = (await self.host(host).run(remote_sh.resolve_workdir(workdir))).strip()
            if not out.startswith("/"):
                raise RemoteError(f"{host}: cannot resolve workdir {workdir!r}: {out[:200]}")
            self._workdirs[key] = out.rstrip("/") or "/"
        return self._workdirs[key]

    # -- fetch ---------------------------------------------------------------
    async def _run_python(self, host: str, workdir: str, run_id: str) -> str:
        """The run's own interpreter: transfers run a small program with it on the host."""
        try:
            # Its own record only (the live file, then the archives newest first, until
            # found): a year of archives is not read for one run's interpreter.
            records = await asyncio.to_thread(self.index.find, [(host, workdir, run_id)])
        except RemoteError:
            return validate.DEFAULT_PYTHON
        return next((r.python for r in records if r.key == (host, workdir, run_id) and r.python),
                    validate.DEFAULT_PYTHON)

    async def list_run(self, host: str, workdir: str, run_id: str) -> list[RemoteEntry]:
        """Everything in the run dir (recursively), for the fetch browser."""
        run_dir = await self.run_dir(host, workdir, run_id)
        python = await self._run_python(host, workdir, run_id)
        return await list_tree(self.host(host), run_dir, python=python)

    async def fetch(self, host: str, workdir: str, run_id: str, path: str, out: Path,
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
        resolved = self._workdirs.get((host, validate.check_workdir(host, workdir)))
        run_dir = (f"{resolved}/{validate.check_run_id(run_id)}" if resolved is not None
                   else remote_sh.run_dir_word(workdir, run_id))
        python = python or await self._run_python(host, workdir, run_id)
        return await fetch(self.host(host), run_dir, rel, out, progress, python=python,
                           on_warning=on_warning, on_landed=on_landed)

    # -- checkpoints -------------------------------------------------------------
    async def checkpoints(self, host: str, workdir: str, run_id: str,
                          world_size: int | None = None) -> list[checkpoint_rule.Checkpoint]:
        """The run's `checkpoint-N` directories, newest first, each judged complete or not
        (and why) by the one rule in runs/checkpoints.py: one round trip.

        `world_size`: how many processes saved them, when the caller knows (else inferred).
        Raises NoSuchRunError when the host has no such run directory.
        """
        marker = f"ck_{secrets.token_hex(8)}_end"
        script = remote_sh.checkpoints(workdir, run_id, marker)  # validates before connecting
        out = await self.host(host).run(script)
        if out.startswith("nodir\n") or out == "nodir":
            raise NoSuchRunError(
                f"no run {run_id} on {host} (nothing at {workdir.rstrip('/')}/{run_id}); "
                "`rtrain-tui runs` lists the known runs.")
        return checkpoint_rule.judge(checkpoint_rule.parse_listing(out, marker), world_size)

    # -- resume ------------------------------------------------------------------
    async def resume(self, host: str, workdir: str, run_id: str, *, from_path: str | None = None,
                     restart: bool = False, on_step: StepCallback | None = None,
                     reason: str = "", queue: bool = False) -> resume_mod.ResumedRun:
        """A new attempt of a run that ended failed, stopped or lost, in its run dir: from
        its newest complete checkpoint, `from_path`, or (`restart`) the start; with
        `queue` it waits on the host for free GPUs. See core/resume.py; raises
        RemoteError (one line) when it does not resume."""
        return await resume_mod.resume(self, host, workdir, run_id, from_path=from_path,
                                       restart=restart, on_step=on_step, reason=reason,
                                       queue=queue)

    async def attempts(self, host: str, workdir: str, run_id: str) -> list[dict[str, object]]:
        """The run's attempts as its attempts.jsonl records them ([] when never resumed)."""
        return await resume_mod.attempts(self, host, workdir, run_id)

    # -- stop ------------------------------------------------------------------
    async def stop(
        self, host: str, workdir: str, run_id: str, grace: float = 10.0,
        on_step: StepCallback | None = None,
    ) -> str:
        """The stop ladder of the run's backend: SIGTERM every process of the run, wait
        `grace`, force what is left, verify; then the stop is recorded on the host.

        Returns the outcome line; raises RemoteError when the run did not or may not stop.
        """
        validate.check_run_id(run_id)
        validate.check_workdir(host, workdir)
        validate.check_grace(grace)
        step = on_step or (lambda _msg: None)
        conn = self.host(host)
        kind = backends.get((await self._backends(host, [(workdir, run_id)]))[0])
        code = await kind.stop_ladder(conn, workdir, run_id, grace, secrets.token_hex(8), step)
        if code is None:
            return f"{run_id} was not running on {host}"
        await conn.run(remote_sh.mark_stopped(workdir, run_id, code))
        await asyncio.to_thread(self.remember_state, host, workdir, run_id, probes.STOPPED)
        return f"stopped {run_id} on {host}"

    async def observed(self, host: str, workdir: str, run_id: str, state: str,
                       probe: RunProbe | None = None) -> None:
        """Record `state`, seen outside a refresh (`status`, the end of `tail`), and tell
        it as a refresh would (core/notify): told before it is recorded, or the change
        would be gone from the index. Failures to send go to `notices`."""
        record = await asyncio.to_thread(self.index.get, host, run_id)
        if record is not None and record.workdir == workdir and record.state != probes.STARTING:
            seen = notifier.Seen(record, state, probe.stalled_for if probe else None,
                                 probe.reason if probe else self.reasons.get(record.key, ""),
                                 _epoch_iso(probe.ended_at) if probe else "")
            self.notices += await notifier.notify([seen], self.hosts, self._run_on, datetime.now(UTC))
        await asyncio.to_thread(self.remember_state, host, workdir, run_id, state, probe)

    def remember_state(self, host: str, workdir: str, run_id: str, state: str,
                       probe: RunProbe | None = None) -> None:
        """Record `state` (and, from `probe`, when the run's attempt began running)."""
        # A run the index does not know changes nothing, and set_states then writes nothing.
        key = (host, workdir, run_id)
        self.index.set_states({key: (state, False, index_now())},
                              running=_running(key, probe) if probe is not None else None)


def settled(record: RunRecord) -> bool:
    """Final is final: a run whose state is final and whose end time is recorded can
    change no more, and a refresh does not probe it again.

    A stale record is not settled: its host did not answer when last asked, so the state
    it shows is one kept, not one read (its row says `?stale`), and only an answer from
    the host clears that. A final run without its end time is probed until a probe gives
    it one.
    """
    return probes.is_final(record.state) and bool(record.ended_at) and not record.stale


# What `_settle_start` answers for an entry to drop; never a state word, never stored.
_FORGOTTEN = "forgotten"


def _running(key: RunKey, probe: RunProbe) -> dict[RunKey, tuple[int, str, int | None]]:
    """{key: (attempt, when it began running, seconds the host's retry loop waited before
    it)} when the probe read that; else {}."""
    if probe.running_since is None or probe.running_attempt is None:
        return {}
    return {key: (probe.running_attempt, _epoch_iso(probe.running_since), probe.retry_waited_s)}


def _epoch_iso(epoch: int | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else ""


def _iso_epoch(iso: str) -> int | None:
    """An index time as epoch seconds (None when it does not parse)."""
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def _usable_run_id(run_id: str) -> bool:
    try:
        validate.check_run_id(run_id)
    except validate.ValidationError:
        return False
    return True


def _chooses_gpus(req: StartRequest) -> bool:
    """This start picks GPUs (and sets CUDA_VISIBLE_DEVICES) itself."""
    return (req.gpus > 0 or bool(req.gpu_ids)) and "CUDA_VISIBLE_DEVICES" not in req.env


def _queues(req: StartRequest) -> bool:
    """This start waits on the host for free GPUs (`--queue`; `--gpus 0` never does)."""
    return req.queue and _chooses_gpus(req)


def _gpu_choice_lock(index: RunIndex, host: str) -> Path:
    # Named by a hash: an alias may hold any character a file name cannot.
    digest = hashlib.sha256(host.encode()).hexdigest()[:32]
    return index.path.parent / "starting" / f"gpus-{digest}.lock"


class _HostLock:
    """An exclusive file lock, waited for without blocking the event loop (and without a
    thread that could be left holding it after a cancel); released once, by release()
    or on leaving, whichever comes first.

    With `remove`, release() deletes the file (a lock per run would otherwise leave one
    file per resumed run behind for ever). It is deleted while still held, and a taker
    holds the lock only if the file it locked is still the one at the path: one that
    waited on a file deleted meanwhile opens the path again, so two takers never hold
    two different files of the same name."""

    def __init__(self, path: Path, remove: bool = False) -> None:
        self.path = path
        self.remove = remove
        self._fd: int | None = None

    async def acquire(self, timeout: float, busy: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RemoteError(f"{busy} for over {timeout:g} s; try again.") from None
                    await asyncio.sleep(0.05)
                    continue
                if _same_file(fd, self.path):
                    break
                os.close(fd)  # its holder removed it: the lock is the path's file now
                fd = -1  # closed: were the reopen to fail, never closed again (another file's, by then)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            if self.remove:
                self.path.unlink(missing_ok=True)  # still held: nobody can take it in between
            os.close(self._fd)  # closing the file lets go of the lock
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path`."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _starting_lock(index: RunIndex, token: str) -> Path:
    return index.path.parent / "starting" / f"{remote_sh.check_token(token)}.lock"


def _start_in_progress(index: RunIndex, token: str) -> bool:
    """True while the process that is starting this run holds its lock."""
    if not token:
        return False
    path = _starting_lock(index, token)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


async def _write_remote_text(sftp, path: str, text: str | bytes,  # type: ignore[no-untyped-def]
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


async def _write_remote_files(sftp, run_dir: str, files: Mapping[str, bytes]) -> None:  # type: ignore[no-untyped-def]
    """A backend's extra launch files (`Backend.launch_files`), each written as above."""
    await _together(*(_write_remote_text(sftp, f"{run_dir}/{name}", data)
                      for name, data in files.items()))


async def _place_when_stored(conn: HostConnection, storing: Awaitable[Stored],
                             name: str, run_dir: str) -> None:
    """Link the dataset into the run dir once `storing` (Engine._store) has it in the store."""
    stored = await storing
    await place_dataset(conn, name, stored.workdir, stored.digest, run_dir)


async def _together(*steps: Awaitable[object]) -> None:
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
