"""Parsers for what the scripts in `remote_sh.py` print, into frozen dataclasses.

Pure functions: no I/O, so every verdict (ready or not, which status word) is unit-tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import state_rule
from rtrain_tui.core.runs.state_rule import HostFacts, run_state
from rtrain_tui.core.safety.sanitize import safe_line

# The status vocabulary of docs/design.md is decided by one rule (state_rule.py); its
# words are named here too, where every face has always found them.
STARTING = state_rule.STARTING
QUEUED = state_rule.QUEUED
RUNNING = state_rule.RUNNING
COMPLETED = state_rule.COMPLETED
STOPPED = state_rule.STOPPED
LOST = state_rule.LOST
UNKNOWN = state_rule.UNKNOWN
FAILED = state_rule.FAILED
failed_word = state_rule.failed_word
UNREACHABLE = "unreachable"
FINAL_STATES = (COMPLETED, STOPPED, LOST)


def is_final(state: str) -> bool:
    """True once a run can change no more: the tail of it may end."""
    return state in FINAL_STATES or state.startswith("failed")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_used_mib: int
    memory_total_mib: int
    utilization_pct: int
    # Fields nvidia-smi answered `[N/A]` for (MIG, some vGPUs); they read 0 above.
    unknown: frozenset[str] = frozenset()
    uuid: str = ""  # in GPU samples (gpus.py), where processes name their GPU by it

    def shown(self, field_name: str) -> str:
        """A numeric field as text: `?` where nvidia-smi said `[N/A]` (never a made-up 0)."""
        return "?" if field_name in self.unknown else str(getattr(self, field_name))

    def json_value(self, field_name: str) -> int | None:
        return None if field_name in self.unknown else getattr(self, field_name)

    @property
    def busy(self) -> bool:
        # A GPU someone else is training on: real load or most of its memory taken.
        return self.utilization_pct >= 10 or self.memory_used_mib > self.memory_total_mib // 2


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warning: bool = False  # shown as "!" — reported, but not a reason to refuse


@dataclass(frozen=True)
class PreflightReport:
    host: str
    reachable: bool
    checks: tuple[Check, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()
    python_version: str = ""
    disk_free_kb: int | None = None
    has_setsid: bool = False
    error: str = ""
    backend: str = "direct"
    partitions: tuple[Any, ...] = ()  # slurm.Partition, for a login node
    jobs: tuple[str, ...] = ()  # the user's queued/running jobs on a login node (raw rows)
    slurm_login: bool = False  # `sbatch` is on the PATH: this looks like a Slurm login node

    @property
    def why_not(self) -> list[str]:
        if not self.reachable:
            return [self.error]
        return [c.detail for c in self.checks if not c.ok and not c.warning]

    @property
    def ok(self) -> bool:
        return self.reachable and not self.why_not

    def gpu_summary(self) -> str:
        """`2× H200 · 1 busy`, or `no GPU`; a cluster: `Slurm · 3/4 GPUs free`."""
        if self.backend == "slurm":
            total = sum(p.gpus_total for p in self.partitions)
            free = total - sum(p.gpus_used for p in self.partitions)
            return f"Slurm · {free}/{total} GPUs free"
        if not self.gpus:
            return "no GPU"
        names = {g.name for g in self.gpus}
        name = names.pop() if len(names) == 1 else "GPUs"
        busy = sum(g.busy for g in self.gpus)
        return f"{len(self.gpus)}× {name.removeprefix('NVIDIA ')} · {busy} busy"

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "ok": self.ok,
            "why_not": self.why_not,
            "checks": [
                {"name": c.name, "ok": c.ok, "warning": c.warning, "detail": c.detail}
                for c in self.checks
            ],
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    # null where nvidia-smi answered [N/A] (MIG, some vGPUs)
                    "memory_used_mib": g.json_value("memory_used_mib"),
                    "memory_total_mib": g.json_value("memory_total_mib"),
                    "utilization_pct": g.json_value("utilization_pct"),
                }
                for g in self.gpus
            ],
            "python": self.python_version,
            "disk_free_kb": self.disk_free_kb,
            "setsid": self.has_setsid,
            "backend": self.backend,
            "slurm_login": self.slurm_login,
            "partitions": [
                {"name": p.name, "default": p.default, "nodes": p.nodes,
                 "gpus_total": p.gpus_total, "gpus_used": p.gpus_used}
                for p in self.partitions
            ],
            "jobs": list(self.jobs),
        }


def parse_key_values(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            pairs.append((key.strip(), value.strip()))
    return pairs


MAX_GPUS = 64
MAX_GPU_OUTPUT = 64 * 1024  # bytes of nvidia-smi rows believed; beyond this it is malformed
_NUMERIC = ("memory_used_mib", "memory_total_mib", "utilization_pct")


def _parse_gpu(value: str) -> GpuInfo | None:
    """One `index, name, used, total, util` row; `[N/A]` numbers are kept as unknown."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 5:
        return None
    numbers: list[int] = []
    unknown: set[str] = set()
    try:
        index = int(parts[0])
        for field_name, part in zip(_NUMERIC, parts[2:]):
            if part in ("[N/A]", "N/A", "[Not Supported]"):
                unknown.add(field_name)
                numbers.append(0)
            else:
                numbers.append(int(part))
    except ValueError:
        return None
    name = safe_line(parts[1])[:120]  # host text: shown in the terminal and the TUI
    used, total, util = numbers  # one per _NUMERIC: there were five parts
    return GpuInfo(index, name, used, total, util, unknown=frozenset(unknown))


def human_kb(kb: int) -> str:
    size = float(kb) * 1024
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{kb} KiB"  # pragma: no cover - loop always returns


def parse_preflight(host: str, output: str, python: str, gpus_needed: int,
                    ship_bytes: int = 0) -> PreflightReport:
    """Turn the preflight script's output into checks with the seed's wording."""
    values = [(k, safe_line(v)) if k != "gpu" else (k, v) for k, v in parse_key_values(output)]
    facts = dict(values)
    gpu_rows = [v for k, v in values if k == "gpu"]
    malformed = ""
    if len(gpu_rows) > MAX_GPUS or sum(len(v) + 5 for v in gpu_rows) > MAX_GPU_OUTPUT:
        # 400,000 rows are not 400,000 GPUs: believe none of it, print none of it.
        malformed = (f"malformed output ({len(gpu_rows)} rows, more than {MAX_GPUS} GPUs or "
                     f"{MAX_GPU_OUTPUT // 1024} KiB)")
        gpu_rows = []
    gpu_list = tuple(g for v in gpu_rows if (g := _parse_gpu(v)))
    gpu_errors = [safe_line(v)[:200] for v in gpu_rows if _parse_gpu(v) is None]
    if malformed:
        gpu_errors.insert(0, malformed)
    checks: list[Check] = []

    py = facts.get("python", "missing")[:200]
    if py == "missing" or not py[:1].isdigit():
        checks.append(Check("python", False, f"{python} does not run on {host}: {py}"))
    else:
        checks.append(Check("python", True, f"{python} {py}"))

    if facts.get("trainer") == "ok":
        checks.append(Check("trainer", True, "praisonai_train importable"))
    else:
        checks.append(
            Check(
                "trainer",
                False,
                f"praisonai_train is not importable by {python} (pip install praisonai-train)",
                warning=True,
            )
        )

    smi = facts.get("nvidia_smi", "missing")
    slurm_login = facts.get("sbatch") == "yes"
    if slurm_login:
        checks.append(Check("slurm", True, "this looks like a Slurm login node: start with "
                            "--backend slurm, or set backend = \"slurm\" for it in config.toml",
                            warning=True))
    if gpus_needed == 0:
        checks.append(Check("gpus", True, f"CPU-only run; {len(gpu_list)} GPU(s) present"))
    elif smi == "missing":
        checks.append(Check("gpus", False, f"needs {gpus_needed} GPU(s), found 0 (no nvidia-smi)"))
    elif malformed or (smi != "0" and not gpu_list):
        why = malformed or ("timed out" if smi == "124" else (gpu_errors[0] if gpu_errors else f"exit {smi}"))
        checks.append(Check("gpus", False, f"nvidia-smi failed: {why}"))
    elif len(gpu_list) < gpus_needed:
        checks.append(
            Check("gpus", False, f"needs {gpus_needed} GPU(s), found {len(gpu_list)}")
        )
    else:
        busy = sum(g.busy for g in gpu_list)
        checks.append(Check("gpus", True, f"{len(gpu_list)} GPU(s), {busy} busy"))

    disk_kb = None
    try:
        disk_kb = int(facts.get("disk_free_kb", ""))
        need_kb = -(-ship_bytes // 1024)
        if disk_kb < need_kb:
            # Refused before the upload: a full disk mid-upload costs the user the wait.
            checks.append(Check("disk", False, f"no space left: the config and dataset need "
                                f"{human_kb(need_kb)}, {human_kb(disk_kb)} is free in the "
                                f"workdir; free some space on {host}"))
        else:
            checks.append(Check("disk", True, f"{human_kb(disk_kb)} free in workdir"))
    except ValueError:
        checks.append(Check("disk", False, "free disk space unknown", warning=True))

    has_setsid = facts.get("setsid") == "yes"
    checks.append(
        Check(
            "setsid",
            has_setsid,
            "setsid present" if has_setsid else "no setsid: runs start under nohup",
            warning=not has_setsid,
        )
    )
    return PreflightReport(
        host=host,
        reachable=True,
        checks=tuple(checks),
        gpus=gpu_list,
        python_version=py if py[:1].isdigit() else "",
        disk_free_kb=disk_kb,
        has_setsid=has_setsid,
        slurm_login=slurm_login,
    )


@dataclass(frozen=True)
class RunProbe:
    """What one probe of a run dir found; `state` is the status word."""

    exists: bool
    pid: int | None = None
    alive: bool = False  # the wrapper, or any process carrying the run's marker, lives
    exit_code: int | None = None
    stop_requested: bool = False  # a stop of ours was issued
    stopped: bool = False  # a stop of ours saw every process of the run gone
    launched: bool = False
    ended_at: int | None = None  # epoch seconds on the host's clock, when asked for and known
    status_unwritten: bool = False  # the wrapper ended but could not write the exit code
    disk_free_kb: int | None = None  # free space of the run dir, probed when status_unwritten
    # Set by a scheduler backend (backends/slurm): the job is waiting, why, and what the
    # scheduler says of it (its own word: Slurm's PENDING, RUNNING, TIMEOUT…).
    queued: bool = False
    reason: str = ""  # why it waits or why it ended (TIMEOUT, OUT_OF_MEMORY…): beside the word
    job_id: str = ""
    scheduler_state: str = ""
    queue_place: int | None = None  # a waiting job's place in its partition's queue (1 = next)
    # The box booted since the run's wrapper started (its boot id then ≠ now): a `lost`
    # run that a refresh may retry (`start --retries`, core/resume.py).
    rebooted: bool = False
    # A running run whose log has not grown for this many seconds, by the host's clock
    # (the wrapper's stall watchdog); None when it is not stalled.
    stalled_for: int | None = None
    gpus_idle_for: int | None = None  # its GPUs stayed under 5% busy this long (seconds)
    # When attempt `running_attempt` got its GPUs (a `--queue` run) or left Slurm's queue,
    # epoch seconds by the host's clock (its `running_since`): its cost counts from then.
    running_since: int | None = None
    running_attempt: int | None = None
    # A retried attempt (the host's retry loop): the seconds the loop waited between its
    # attempts, which the index's cost leaves out (core/runs/cost.py).
    retry_waited_s: int | None = None

    # Slurm: `sbatch` for the run's job is still running (its `submitting` marker names
    # that live process): the run is `starting`, never `lost`.
    submitting: bool = False

    @property
    def facts(self) -> HostFacts:
        """What the state rule (state_rule.py) decides from."""
        return HostFacts(exists=self.exists, stopped=self.stopped, stop_requested=self.stop_requested,
                         exit_code=self.exit_code, queued=self.queued, alive=self.alive,
                         unwritten=self.status_unwritten, submitting=self.submitting,
                         launched=self.launched)

    @property
    def state(self) -> str:
        """The status word, by the one state rule (state_rule.run_state)."""
        return run_state(self.facts)[0]


STALL_WORDS = ("stalled", "GPUs idle")  # how a stall's reason starts


def stall_reason(seconds: int | None, gpus_idle: int | None = None) -> str:
    """`stalled: no output for 17m`, else `GPUs idle for 12m` ('' when neither): the
    reason beside `running`."""
    if seconds is not None and seconds >= 0:
        return f"stalled: no output for {_minutes(seconds)}"
    if gpus_idle is not None and gpus_idle >= 0:
        return f"GPUs idle for {_minutes(gpus_idle)}"
    return ""


def _minutes(seconds: int) -> str:
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m"


def _int_or_none(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def check_answered(answered: int, count: int, output: str, host: str) -> None:
    """Raise RemoteError when a probe of `count` runs answered about none of them.

    Such an answer is the probe failing (the script did not run: a shell error, a host
    that refused it), not every run missing: the runs go stale, never `unknown`.
    """
    if count and not answered:
        said = next((safe_line(line) for line in output.splitlines() if line.strip()), "")
        raise RemoteError(
            f"{host}: the probe of {count} run(s) got no answer about any of them"
            f"{': ' + said[:200] if said else ''}; the runs keep their last known state."
        )


def run_facts(output: str, count: int) -> dict[int, dict[str, str]]:
    """The `I<TAB>key=value...` lines of a probe, by run index: a run's facts may come
    in more than one line (its end time comes last, read for all runs at once)."""
    found: dict[int, dict[str, str]] = {}
    for line in output.splitlines():
        index, *fields = line.split("\t")
        i = _int_or_none(index) if index[:1].isdigit() else None
        if i is None or not 0 <= i < count:
            continue
        found.setdefault(i, {}).update(f.partition("=")[::2] for f in fields)
    return found


def running_since(facts: Mapping[str, str]) -> tuple[int | None, int | None]:
    """`running_since=ATTEMPT EPOCH` (host text) as (epoch, attempt); (None, None) unless
    both are plain numbers."""
    attempt, _, epoch = facts.get("running_since", "").partition(" ")
    epoch = epoch.partition(" ")[0]  # a retried attempt's line goes on with its waits
    if not all(t.isascii() and t.isdigit() for t in (attempt, epoch)) or \
            len(attempt) > 6 or len(epoch) > 11:
        return None, None
    return int(epoch), int(attempt)


def retry_waited(facts: Mapping[str, str]) -> int | None:
    """`running_since=ATTEMPT EPOCH WAITED` (a retried attempt's, core/host/retry.sh): the
    seconds the host's retry loop waited between its attempts; None when not said."""
    if running_since(facts) == (None, None):
        return None
    words = facts.get("running_since", "").split(" ")
    waited = words[2] if len(words) == 3 else ""
    return int(waited) if waited.isascii() and waited.isdigit() and len(waited) <= 11 else None


def parse_run_states(output: str, count: int, host: str = "the host") -> list[RunProbe]:
    """Parse `run_states` output; a run the script said nothing about is `unknown`,
    and an answer about none of them raises RemoteError (see `check_answered`)."""
    found: dict[int, RunProbe] = {}
    for i, facts in run_facts(output, count).items():
        since, since_attempt = running_since(facts)
        found[i] = RunProbe(
            exists=facts.get("exists") == "1",
            pid=_int_or_none(facts.get("pid", "")),
            alive=facts.get("alive") == "1",
            exit_code=_int_or_none(facts.get("code", "")),
            stop_requested=facts.get("stop") == "1",
            stopped=facts.get("stopped") == "1",
            launched=facts.get("launched") == "1",
            ended_at=_int_or_none(facts.get("ended", "")),
            status_unwritten=facts.get("unwritten") == "1",
            disk_free_kb=_int_or_none(facts.get("free_kb", "")),
            # Why a live run waits: for free GPUs in the host's queue (`start --queue`), or
            # to try again (retry by itself); or why a failed one was not tried again.
            queued=facts.get("queued") == "1" or (bool(facts.get("retry")) and facts.get("alive") == "1"),
            reason=safe_line(facts.get("reason") or facts.get("retry", "")
                             or stall_reason(_int_or_none(facts.get("stalled", "")),
                                             _int_or_none(facts.get("gpus_idle", ""))))[:300],
            queue_place=_int_or_none(facts.get("place", "")),
            rebooted=facts.get("rebooted") == "1",
            stalled_for=_int_or_none(facts.get("stalled", "")) if facts.get("alive") == "1" else None,
            gpus_idle_for=_int_or_none(facts.get("gpus_idle", "")) if facts.get("alive") == "1" else None,
            running_since=since, running_attempt=since_attempt,
            retry_waited_s=retry_waited(facts),
        )
    check_answered(len(found), count, output, host)
    return [found.get(i, RunProbe(exists=False)) for i in range(count)]


@dataclass(frozen=True)
class FoundRun:
    """A run directory `find_runs` saw: under workdir number `workdir`, started at `started`."""

    workdir: int
    run_id: str
    started: int | None  # epoch seconds, host clock


def parse_found_runs(output: str, count: int) -> tuple[dict[int, str], list[FoundRun]]:
    """Parse `find_runs` output: ({workdir number: absolute path}, the runs found).

    Lines that do not parse, or name a workdir number out of range, are skipped.
    """
    resolved: dict[int, str] = {}
    found: list[FoundRun] = []
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        i = _int_or_none(fields[0]) if fields else None
        if i is None or not 0 <= i < count:
            continue
        if kind == "wd" and len(fields) == 2 and fields[1].startswith("/"):
            resolved[i] = fields[1].rstrip("/") or "/"
        elif kind == "run" and len(fields) == 3 and fields[1]:
            found.append(FoundRun(i, fields[1], _int_or_none(fields[2])))
    return resolved, found


@dataclass(frozen=True)
class WentOn:
    """A known run that had ended and went on since (`find_runs`'s `end` line): under
    workdir number `workdir`, with `attempts` attempts so far (None: not told)."""

    workdir: int
    run_id: str
    attempts: int | None


def parse_went_on(output: str, count: int) -> list[WentOn]:
    """The `end` lines of `find_runs` output: the known runs that went on after the end
    recorded for them. Lines that do not parse, or are out of range, are skipped."""
    went: list[WentOn] = []
    for line in output.splitlines():
        if not line.startswith("end\t"):
            continue
        fields = line.split("\t")[1:]
        i = _int_or_none(fields[0])
        if len(fields) == 5 and i is not None and 0 <= i < count and fields[1]:
            attempts = _int_or_none(fields[3])
            went.append(WentOn(i, fields[1], attempts if attempts and attempts < 100_000 else None))
    return went
