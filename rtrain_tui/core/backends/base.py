"""The one interface between the engine and a kind of host.

A backend decides only how a run is launched, probed and stopped there, as `sh` text
sent over the shared connection, and what a start may ask of it. The engine keeps what
every backend shares: the start transaction (index entry, run dir, uploads, undoing a
start that never launched), refresh, discovery, fetch, recording a verified stop.

Shaped after dstack's `Compute(ABC)`: the few methods every backend has are abstract; a
capability only some have is a subclass the engine tests for (`GpuChoice`: the client
chooses the run's GPUs, and the host's GPU sample rides with its probe). A third backend
is one more folder beside `direct/` and `slurm/`, added to the registry in `__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from rtrain_tui.core.runs.hostconfig import HostSettings
    from rtrain_tui.core.runs.probes import PreflightReport, RunProbe

# asyncio is imported inside the coroutines that use it (they run in a loop, so it is
# loaded by then): `rtrain-tui runs` reads the config, which names backends, and
# importing asyncio for that was a third of its start-up (issue 17).
StepCallback = Callable[[str], None]
Runs = Sequence[tuple[str, str]]  # (workdir, run id), in the order answers come back
T = TypeVar("T")


async def finish_when_cancelled(aw: Awaitable[T], bound: float = 10.0) -> T:
    """Await `aw`; if the caller is cancelled meanwhile, let `aw` end first (at most
    `bound` seconds), then let the cancel go on.

    For a signal on its way to the host: once the script is sent the host may already
    have delivered it, so the step that says "SIGTERM sent" must still run. Otherwise a
    stop cancelled at that moment tells its user no signal was sent while the trainer is
    already saving its checkpoint.
    """
    import asyncio  # here, not at the top: see below

    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task}, timeout=bound)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the cancel is what the caller hears
        task.cancel()  # still running after `bound`: given up with the caller
        raise


class HostShell(Protocol):
    """What a backend needs of a host's connection (`HostConnection` is one): its name,
    and a script run in the host's `sh`, answering its output (stdout and stderr)."""

    alias: str

    async def run(self, script: str, timeout: float = ...) -> str: ...


class BackendOptions(Protocol):
    """A backend's own start options (e.g. `SlurmOptions`), opaque to the engine."""

    def validated(self) -> Self: ...


@dataclass(frozen=True)
class LaunchSpec:
    """What a launch needs to write the run's launch file; every value already validated."""

    run_id: str
    token: str
    trainer: str  # the template, as the request (or `adapt_request`) has it
    python: str
    dataset: str | None  # the shipped dataset's file name in the run dir
    gpus: int
    env: Mapping[str, str] = field(default_factory=dict)  # the trainer's, with chosen GPUs
    options: BackendOptions | None = None
    # A resumed run's new attempt (`Engine.resume`): its number (its log goes on after
    # the attempts before it) and the checkpoint it resumes from ('' = from the start).
    attempt: int = 1
    resume_from: str = ""
    # `start --retries N`: a failed attempt is tried again by the host, up to N times
    # (a backend that cannot refuses it in `check_retries`).
    retries: int = 0
    retry_base_s: float = 30.0  # the wait before retry attempt K is K × this
    # Notice a stall: no log output for this long (0: never), checked this often, and
    # what to do then (warn, stop, restart). A backend without a watchdog ignores them.
    stall_after_s: int = 0
    stall_check_s: float = 60.0
    on_stall: str = "warn"
    gpus_idle_s: float = 600.0  # the run's GPUs under 5% busy this long: said, as a stall
    # `start --queue` on a box: the wrapper waits on the host for this many free GPUs, or
    # for the GPUs `queue_ids` (the host chooses them; env then holds none). None: no wait.
    queue: tuple[int, tuple[int, ...]] | None = None
    # The host tells these events itself (a backend with `notifies_on_host`): the run dir
    # holds notify.json and notify.pyz (the engine writes them). (): the clients tell.
    notify_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launched:
    """What a launch answered: a pid (a box) or a job id (a scheduler), and the state now."""

    state: str
    pid: int = 0
    job_id: str = ""
    # What the host said on launching (a cluster's job_submit notice), one line,
    # control sequences removed; '' when it said nothing.
    message: str = ""


class Backend(ABC):
    """How runs are launched, probed and stopped on one kind of host (see the module doc)."""

    name: ClassVar[str]
    launch_file: ClassVar[str]  # the file in the run dir that the launch starts
    launch_step: ClassVar[str]  # what a start's progress says while launching
    # Trainer templates of its own whose `{dataset}` may be empty, like the default one.
    built_in_trainers: ClassVar[tuple[str, ...]] = ()
    # The wrapper tries a failed attempt again on the host (`start --retries N`).
    retries_on_host: ClassVar[bool] = False
    # Its run tells its own end and stalls from the host (core/notify/host_send.py).
    notifies_on_host: ClassVar[bool] = False

    # -- option checks ------------------------------------------------------------------
    def options(self, settings: HostSettings, given: BackendOptions | None) -> BackendOptions | None:
        """The validated options of a start or preflight: `given`, else the host's defaults.

        Raises ValidationError. A backend without options of its own answers None.
        """
        return None

    def adapt_request(self, trainer: str, gpu_ids: Sequence[int], allow_busy: bool,
                      options: BackendOptions | None) -> str:
        """The trainer template this backend runs; refuses what does not apply to it."""
        return trainer

    def placement(self, gpus: int, options: BackendOptions | None) -> tuple[int, int]:
        """(nodes, GPUs on each) a run asking for `gpus` holds while it runs: what a
        per-GPU-hour price counts (core/runs/cost.py). One node by default."""
        return (1, gpus)

    # -- preflight ----------------------------------------------------------------------
    @abstractmethod
    def preflight_script(self, python: str, workdir: str) -> str:
        """The facts script a preflight sends."""

    @abstractmethod
    def parse_preflight(self, host: str, output: str, *, python: str, gpus: int,
                        ship_bytes: int, options: BackendOptions | None,
                        local: bool) -> PreflightReport:
        """The preflight verdict from what the script printed (`local`: the demo host,
        whose commands run on this machine)."""

    # -- launch ---------------------------------------------------------------------------
    @abstractmethod
    def launch_text(self, spec: LaunchSpec) -> str:
        """The text of `launch_file`, written into the run dir before `launch_script`."""

    def launch_files(self, spec: LaunchSpec) -> Mapping[str, bytes]:
        """Files the run dir gets beside the launch file (name -> bytes); none by default."""
        return {}

    def check_retries(self, retries: int, on_stall: str = "warn",
                      options: BackendOptions | None = None) -> None:
        """Raise ValidationError when `retries` > 0 (or `--on-stall` stop or restart) and
        the host cannot retry (or watch a run) by itself, or not with these `options`."""
        if (retries or on_stall != "warn") and not self.retries_on_host:
            from rtrain_tui.core.safety.validate import ValidationError

            raise ValidationError(
                f"--retries needs a host that tries a failed run again by itself, and a "
                f"{self.name} host does not: leave out --retries (and config.toml's `retries`) "
                "and --on-stall stop or restart, and use `rtrain-tui resume HOST RUN` after a "
                "failure.")

    @abstractmethod
    def launch_script(self, run_dir: str, token: str) -> str:
        """Start the run once. Idempotent: sent again (a dropped link) it launches nothing
        and answers the one launch. Prints `key=value` lines; `error=...` when nothing was
        launched (the start is then undone)."""

    @abstractmethod
    def launched(self, host: str, run_id: str, answer: Mapping[str, str]) -> Launched:
        """Read a launch's answer that holds no `error`; RemoteError when it says too
        little (the run may be running: nothing is undone)."""

    # -- probe ----------------------------------------------------------------------------
    @abstractmethod
    def probe_script(self, runs: Runs, need_end: Sequence[int] = ()) -> str:
        """One script for all of this backend's runs on a host: one line per run, by its
        position. Runs at the positions in `need_end` also say when they ended, if known.
        It may follow another script's text in one round trip, and print lines of its own
        that do not start with a digit."""

    @abstractmethod
    def parse_probe(self, output: str, count: int, host: str) -> list[RunProbe]:
        """The `count` runs' probes; RemoteError when the answer is about none of them."""

    # -- stop -----------------------------------------------------------------------------
    @abstractmethod
    async def stop_ladder(self, conn: HostShell, workdir: str, run_id: str, grace: float,
                          nonce: str, step: StepCallback) -> int | None:
        """Signal, wait `grace`, force, verify that nothing of the run is left.

        Returns the exit code to record for the stop (143 after TERM, 137 after a forced
        end), or None when the run was not running. Raises RemoteError when it did not or
        may not stop. Idempotent: `nonce` marks this stop on the host, so a re-sent step
        never reads our own stop as "not running".
        """

    def describe_stop(self, grace: float) -> str:
        """What the stop ladder will do, in words, for a confirmation."""
        return f"The run gets SIGTERM; after {grace:g} s what is left is ended."


class GpuChoice(Backend):
    """Capability: the client chooses a run's GPUs (CUDA_VISIBLE_DEVICES) on this host,
    from a sample of its GPUs taken with the same probe. A backend that has it derives
    from this instead of `Backend`; the engine asks `isinstance(kind, GpuChoice)`."""

    @abstractmethod
    def probe_with_gpus(self, runs: Runs, need_end: Sequence[int] = ()) -> str:
        """`probe_script` that also reports the host's GPUs (the last background sample,
        and starts the next one): still one round trip."""

    @abstractmethod
    def sample_now_script(self, runs: Runs, workdir: str | None = None) -> str:
        """`probe_script` plus a GPU sample taken now (slower: it waits for nvidia-smi),
        and, with `workdir`, the GPUs the host records as given to our live runs there."""

    @abstractmethod
    def claim_script(self, workdir: str, run_id: str, ids: Sequence[int], share: bool = False) -> str:
        """Record on the host, under its GPU lock, that the run has the GPUs `ids`; prints
        `claimed=1`, or `held=I,RUN` when a live run of ours got one meanwhile (never
        with `share`: the start allowed busy GPUs)."""
