"""The engine: the one object the CLI and the TUI call (and nothing below it), a thin face
over the engine's operations, one module each, over one shared context:

- context.py: the connections, the index, the hosts' config, each run's backend, what the
  last refreshes heard; probing.py adds the reads of the hosts (probes, GPUs, preflight,
  checkpoints). `Engine` is that context, so its state and reads are its own.
- launch.py: the one launch path (check → store the dataset → choose GPUs → make the
  attempt → claim the GPUs on the host → ship the files → launch → record) that
  start.py and resume.py each take their stages of.
- refresh.py (and discovery), stop.py, fetch_run.py, host_sender.py (`notify test`).

Input is validated by the caller-facing methods before any connection is opened. How a
run is launched, probed and stopped is its backend's (`core/backends/`, the one its index
record names); the engine asks it through `backends.Backend` and names none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rtrain_tui.core import fetch_run, host_sender, refresh, resume, start, stop
from rtrain_tui.core.context import resolved_here
from rtrain_tui.core.launch import (
    BUILT_IN_TRAINERS,
    CLEANUP_TIMEOUT,
    CREATED,
    GPU_CHOICE_WAIT,
    LAUNCHED,
    LAUNCHING,
    LEFT,
    NOTHING,
    REMOVED,
    CreatedCallback,
    StartedRun,
    StartRequest,
    StartTrace,
    StepCallback,
    Stored,
    trainer_command,
)
from rtrain_tui.core.probing import HostProbe, Prober
from rtrain_tui.core.refresh import settled
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers.transfer import Progress, RemoteEntry

# What the faces import from here: the requests and answers of the operations.
__all__ = [
    "BUILT_IN_TRAINERS", "CLEANUP_TIMEOUT", "CREATED", "GPU_CHOICE_WAIT", "LAUNCHED",
    "LAUNCHING", "LEFT", "NOTHING", "REMOVED", "CreatedCallback", "Engine", "HostProbe",
    "StartRequest", "StartTrace", "StartedRun", "StepCallback", "Stored", "resolved_here",
    "settled", "trainer_command",
]


class Engine(Prober):
    """The shared context and its reads (probing.Prober), with one method per operation."""

    async def notify_test_from_host(self, host: str, urls: Sequence[str],
                                    workdir: str = validate.DEFAULT_WORKDIR,
                                    python: str = validate.DEFAULT_PYTHON) -> list[tuple[str, str]]:
        """`notify test HOST`'s second half: the test message sent by `host` itself, by the
        path a run's end takes. [(each URL the host can send, masked; '' or why not)]."""
        return await host_sender.notify_test_from_host(self, host, urls, workdir, python)

    async def start(
        self, request: StartRequest, progress: Progress | None = None,
        on_step: StepCallback | None = None, on_created: CreatedCallback | None = None,
        trace: StartTrace | None = None,
    ) -> StartedRun:
        """Preflight, make the run dir, upload, launch; see start.py.

        `trace` (optional) is kept up to date with what the start has done on the host,
        so a caller whose start was cancelled can say what is left there.
        """
        return await start.start(self, request, progress, on_step, on_created, trace)

    async def refresh(self, records: Sequence[RunRecord] | None = None,
                      sample_gpus: bool = False,
                      on_found: Callable[[str, list[RunRecord]], None] | None = None,
                      *, all_runs: bool = False,
                      went_on: bool = False) -> dict[tuple[str, str, str], str]:
        """Update the index from the hosts, all hosts at once, one probe per host; see
        refresh.py. Returns {record key: state} for the runs it probed."""
        return await refresh.refresh(self, records, sample_gpus, on_found, all_runs=all_runs,
                                     went_on=went_on)

    async def discover(self, host: str) -> list[RunRecord]:
        """Add to the index the runs on `host` it does not know; returns those added."""
        return await refresh.discover(self, host)

    async def list_run(self, host: str, workdir: str, run_id: str) -> list[RemoteEntry]:
        """Everything in the run dir (recursively), for the fetch browser."""
        return await fetch_run.list_run(self, host, workdir, run_id)

    async def fetch(self, host: str, workdir: str, run_id: str, path: str, out: Path,
                    progress: Progress | None = None,
                    on_warning: Callable[[str], None] | None = None,
                    on_landed: Callable[[Path], None] | None = None,
                    python: str | None = None) -> Path:
        """Fetch `path` (relative to the run dir) into `out`; returns the local path (see
        fetch_run.py)."""
        return await fetch_run.fetch(self, host, workdir, run_id, path, out, progress,
                                     on_warning=on_warning, on_landed=on_landed, python=python)

    async def resume(self, host: str, workdir: str, run_id: str, *, from_path: str | None = None,
                     restart: bool = False, on_step: StepCallback | None = None,
                     reason: str = "", queue: bool = False) -> resume.ResumedRun:
        """A new attempt of a run that ended failed, stopped or lost, in its run dir: from
        its newest complete checkpoint, `from_path`, or (`restart`) the start; with
        `queue` it waits on the host for free GPUs. See core/resume.py; raises
        RemoteError (one line) when it does not resume."""
        return await resume.resume(self, host, workdir, run_id, from_path=from_path,
                                   restart=restart, on_step=on_step, reason=reason, queue=queue)

    async def attempts(self, host: str, workdir: str, run_id: str) -> list[dict[str, object]]:
        """The run's attempts as its attempts.jsonl records them ([] when never resumed)."""
        return await resume.attempts(self, host, workdir, run_id)

    async def stop(
        self, host: str, workdir: str, run_id: str, grace: float = 10.0,
        on_step: StepCallback | None = None,
    ) -> str:
        """The stop ladder of the run's backend, then the stop recorded (see stop.py).

        Returns the outcome line; raises RemoteError when the run did not or may not stop.
        """
        return await stop.stop(self, host, workdir, run_id, grace, on_step)
