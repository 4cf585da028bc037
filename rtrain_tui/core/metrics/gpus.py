"""GPUs on a host: one sample (per-GPU load and who holds each GPU), a short history of
samples, and the choice of GPUs for a start.

Pure functions and frozen data: the direct backend's `scripts.gpu_sample` is the script,
this module the one place that knows its output. The history is kept in memory by the engine, per host.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from rtrain_tui.core.errors import GpusBusyError, RemoteError
from rtrain_tui.core.runs.probes import MAX_GPUS, GpuInfo
from rtrain_tui.core.safety.sanitize import safe_line

MAX_APPS = 256  # GPU processes believed per sample; beyond this the sample is malformed
HISTORY_SECONDS = 600.0  # the host panel's sparklines span the last 10 minutes
_MARK = re.compile(r"/proc/(\d{1,11})/environ:RTRAIN_RUN=([0-9a-f]{8,64})")
_UNKNOWN = ("[N/A]", "N/A", "[Not Supported]")


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU: one of our runs (`run_id`), or someone else's."""

    gpu_uuid: str
    pid: int | None
    used_mib: int | None
    user: str = ""  # host text, made safe; "" when /proc could not tell
    pgid: int | None = None
    token: str = ""  # the RTRAIN_RUN marker in its environment, when we could read it
    run_id: str = ""  # set by `HostGpus.with_runs`

    def holder(self) -> str:
        """`run run-17, pid 4242` for ours, `alice, pid 4242` for anyone else's."""
        pid = f"pid {self.pid}" if self.pid is not None else "pid ?"
        if self.run_id:
            return f"run {self.run_id}, {pid}"
        return f"{self.user or 'unknown user'}, {pid}"


@dataclass(frozen=True)
class HostGpus:
    """One sample of a host's GPUs. `error` says why there is none (no nvidia-smi, …)."""

    gpus: tuple[GpuInfo, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    error: str = ""
    taken_at: float = 0.0  # time.time() on this machine
    timed_out: bool = False
    # A probe's sample was taken in the background (core/backends/direct/gpu_sample_async.sh): the
    # host's uptime then, so one sample read by two probes is kept once.
    host_stamp: int | None = None
    pending: bool = False  # no recent background sample yet: nothing to show or keep
    # (GPU index, run id) of GPUs given to our runs that are starting or running: taken,
    # even before their trainer shows up in nvidia-smi (loading a model takes a while).
    reserved: tuple[tuple[int, str], ...] = ()

    def holders(self, gpu: GpuInfo) -> list[GpuProcess]:
        return [p for p in self.processes if p.gpu_uuid == gpu.uuid]

    def reserved_by(self, gpu: GpuInfo) -> str | None:
        return next((run for index, run in self.reserved if index == gpu.index), None)

    def is_free(self, gpu: GpuInfo) -> bool:
        """Nobody's process on it, no load or memory use that says someone is on it, and
        not given to a run of ours that is still loading."""
        return not gpu.busy and not self.holders(gpu) and self.reserved_by(gpu) is None

    def describe(self, gpu: GpuInfo) -> str:
        """`GPU 1: 97% busy, 68 GiB, held by alice, pid 4242` (the refusal's words)."""
        util = "?" if "utilization_pct" in gpu.unknown else str(gpu.utilization_pct)
        mem = "?" if "memory_used_mib" in gpu.unknown else str(round(gpu.memory_used_mib / 1024))
        text = f"GPU {gpu.index}: {util}% busy, {mem} GiB"
        holders = self.holders(gpu)
        if holders:
            text += ", held by " + "; ".join(p.holder() for p in holders[:3])
            if len(holders) > 3:
                text += f" and {len(holders) - 3} more"
        elif (run := self.reserved_by(gpu)) is not None:
            text += f", given to our run {run}"
        return text

    def with_runs(self, tokens: Mapping[str, str], groups: Mapping[int, str]) -> HostGpus:
        """Name our runs' processes: by their marker (`tokens`: token → run id), else by
        the process group a run's wrapper leads (`groups`: pgid → run id, for runs started
        without a marker, e.g. by `praisonai train remote`)."""
        named = []
        for p in self.processes:
            run_id = tokens.get(p.token, "") if p.token else ""
            if not run_id and p.pgid is not None:
                run_id = groups.get(p.pgid, "")
            named.append(replace(p, run_id=run_id))
        return replace(self, processes=tuple(named))


def _number(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _parse_row(value: str) -> GpuInfo | None:
    """One `index, uuid, util, used, total` row; `[N/A]` numbers are kept as unknown."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 5 or _number(parts[0]) is None:
        return None
    fields = {"utilization_pct": parts[2], "memory_used_mib": parts[3], "memory_total_mib": parts[4]}
    numbers: dict[str, int] = {}
    unknown = set()
    for name, part in fields.items():
        if part in _UNKNOWN:
            unknown.add(name)
            numbers[name] = 0
        elif (n := _number(part)) is None:
            return None
        else:
            numbers[name] = n
    return GpuInfo(int(parts[0]), "", numbers["memory_used_mib"], numbers["memory_total_mib"],
                   numbers["utilization_pct"], unknown=frozenset(unknown),
                   uuid=safe_line(parts[1])[:80])


def parse_gpu_sample(output: str, taken_at: float | None = None) -> HostGpus:
    """The `gpu_sample` lines of a probe's output (other lines are ignored)."""
    rows: list[str] = []
    apps: list[str] = []
    marks: dict[int, str] = {}
    smi = ""
    stamps: dict[str, int | None] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if key in ("gpu_now", "gpu_uptime") and sep:
            stamps[key] = _number(value)
        elif key == "gpu" and sep:
            rows.append(value)
        elif key == "gpu_app" and sep:
            apps.append(value)
        elif key == "gpu_smi" and sep:
            smi = value.strip()
        elif m := _MARK.fullmatch(line.strip()):
            marks[int(m.group(1))] = m.group(2)
    when = time.time() if taken_at is None else taken_at
    stamp = None
    if "gpu_now" in stamps:  # a background sample: date it by the host's uptime
        now, then = stamps["gpu_now"], stamps.get("gpu_uptime")
        if now is None or then is None or not 0 <= now - then <= HISTORY_SECONDS:
            # None yet, or from before a reboot, or too old to mean anything now.
            return HostGpus(error="sampling", taken_at=when, pending=True)
        when, stamp = when - (now - then), then
    if smi == "missing":
        return HostGpus(error="no nvidia-smi", taken_at=when)
    if smi != "0":
        if smi == "124":
            return HostGpus(error="nvidia-smi timed out", taken_at=when, timed_out=True,
                            host_stamp=stamp)
        detail = safe_line(rows[0])[:200] if rows else (f"exit {smi}" if smi else "no answer")
        return HostGpus(error=f"nvidia-smi failed: {detail}", taken_at=when, host_stamp=stamp)
    if len(rows) > MAX_GPUS or len(apps) > MAX_APPS:
        return HostGpus(error=f"malformed nvidia-smi output ({len(rows)} GPU rows, "
                        f"{len(apps)} processes)", taken_at=when)
    gpus = tuple(g for r in rows if (g := _parse_row(r)))
    processes = []
    for value in apps:
        parts = value.split(",", 4)
        if len(parts) != 5:
            continue
        uuid, pid, used, pgid, user = parts
        pid_n = _number(pid)
        processes.append(GpuProcess(
            gpu_uuid=safe_line(uuid.strip())[:80], pid=pid_n, used_mib=_number(used),
            user=safe_line(user.strip())[:64], pgid=_number(pgid),
            token=marks.get(pid_n, "") if pid_n is not None else ""))
    # A row naming no GPU of this sample is not a process (some drivers print "No running
    # processes found" even in CSV mode).
    uuids = {g.uuid for g in gpus}
    processes = [p for p in processes if p.gpu_uuid in uuids]
    return HostGpus(gpus=gpus, processes=tuple(processes), taken_at=when, host_stamp=stamp)


_HELD = re.compile(r"gpu_held=(\d{1,3}),([A-Za-z0-9][A-Za-z0-9._-]{0,63})")


def parse_held(output: str) -> tuple[tuple[int, str], ...]:
    """(GPU index, run id) of the `gpu_held=` lines: GPUs the host records as given to a
    live run of ours (backends/direct/gpu_rule.sh's `held_gpus`), for `HostGpus.reserved`."""
    return tuple((int(m.group(1)), m.group(2)) for line in output.splitlines()
                 if (m := _HELD.fullmatch(line.strip())))


class GpuHistory:
    """A host's samples over the last `seconds` (the sparklines' window), oldest first."""

    def __init__(self, seconds: float = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self.samples: deque[HostGpus] = deque()

    def add(self, sample: HostGpus) -> None:
        if sample.pending:
            return
        latest = self.latest
        if latest is not None and sample.host_stamp is not None and sample.host_stamp == latest.host_stamp:
            # The same background sample, read again: keep the newer naming of its processes.
            self.samples[-1] = replace(sample, taken_at=latest.taken_at)
            return
        self.samples.append(sample)
        while self.samples and self.samples[0].taken_at < sample.taken_at - self.seconds:
            self.samples.popleft()

    @property
    def latest(self) -> HostGpus | None:
        return self.samples[-1] if self.samples else None

    def utilisation(self, index: int) -> list[tuple[float, int]]:
        """(time, % busy) of GPU `index` in every sample that knew it."""
        return [(s.taken_at, g.utilization_pct) for s in self.samples for g in s.gpus
                if g.index == index and "utilization_pct" not in g.unknown]


def sparkline(points: Sequence[tuple[float, float]], now: float, window: float = HISTORY_SECONDS,
              width: int = 16, top: float = 100.0) -> str:
    """`points` (time, value) over the last `window` seconds as `width` block characters.

    Each cell is one slice of the window and shows the mean of the values in it; a slice
    with no sample is a space (the host was not probed then), never a made-up zero.
    """
    blocks = "▁▂▃▄▅▆▇█"
    start = now - window
    sums = [0.0] * width
    counts = [0] * width
    for when, value in points:
        if start <= when <= now:
            cell = min(width - 1, int((when - start) / window * width))
            sums[cell] += value
            counts[cell] += 1
    out = []
    for total, count in zip(sums, counts):
        if not count:
            out.append(" ")
            continue
        frac = max(0.0, min(1.0, total / count / top))
        out.append(blocks[min(len(blocks) - 1, int(frac * len(blocks)))])
    return "".join(out)


def choose_gpus(host: str, sample: HostGpus, count: int, ids: Sequence[int] | None = None,
                allow_busy: bool = False) -> tuple[int, ...]:
    """The GPUs a start gets: `ids` as given, else the `count` least busy free ones.

    Refuses (RemoteError, naming who holds them) when a chosen GPU is in use or fewer
    than `count` are free, unless `allow_busy`.
    """
    if sample.error:
        raise RemoteError(f"{host}: cannot tell which GPUs are free ({sample.error}); "
                          "set CUDA_VISIBLE_DEVICES with --env to choose by hand.")
    by_index = {g.index: g for g in sample.gpus}
    if ids:
        missing = [i for i in ids if i not in by_index]
        if missing:
            have = ", ".join(str(i) for i in sorted(by_index)) or "none"
            raise RemoteError(f"GPU {missing[0]} does not exist on {host} (its GPUs: {have}); "
                              "pick from those with --gpu-ids.")
        held = [by_index[i] for i in ids if not sample.is_free(by_index[i])]
        if held and not allow_busy:
            raise GpusBusyError(f"{host}: the GPUs you chose are in use — "
                              + "; ".join(sample.describe(g) for g in held)
                              + ". Pick others with --gpu-ids, pass --queue to wait for them, "
                              "or --allow-busy to share them.")
        return tuple(ids)

    def load(g: GpuInfo) -> tuple[int, int, int, int]:
        return (not sample.is_free(g), g.utilization_pct, g.memory_used_mib, g.index)

    ranked = sorted(sample.gpus, key=load)
    free = [g for g in ranked if sample.is_free(g)]
    if len(free) < count and not allow_busy:
        busy = [g for g in sorted(sample.gpus, key=lambda g: g.index) if not sample.is_free(g)]
        raise GpusBusyError(f"{host} has {len(free)} free GPU(s), --gpus {count} needs {count}: "
                          + "; ".join(sample.describe(g) for g in busy)
                          + ". Pass --queue to wait for them, --allow-busy to share them, "
                          "or ask for fewer.")
    if len(ranked) < count:
        raise RemoteError(f"{host} has {len(ranked)} GPU(s), --gpus {count} needs {count}.")
    return tuple(sorted(g.index for g in ranked[:count]))


def run_maps(records: Iterable[tuple[str, str, int | None]]) -> tuple[dict[str, str], dict[int, str]]:
    """(token → run id, pgid → run id) from (run id, token, wrapper pid) of a host's runs.

    Give a wrapper pid only for a run the probe found alive: a dead run's pid may since
    lead someone else's process group."""
    records = list(records)
    tokens = {tok: run_id for run_id, tok, _ in records if tok}
    groups = {pid: run_id for run_id, _, pid in records if pid}
    return tokens, groups
