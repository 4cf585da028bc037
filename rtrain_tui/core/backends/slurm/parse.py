"""Reading what a login node answered: Slurm's job states, partitions and preflight facts.

Host text (reasons, node names) is cleaned of control sequences before it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from rtrain_tui.core.backends.slurm.options import SlurmOptions
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.state_rule import run_state
from rtrain_tui.core.safety.sanitize import safe_line

# Slurm job states that still hold the job's processes (or will start them).
_ACTIVE = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
           "RESIZING", "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_PENDING = {"PENDING"}
# Ends that are the job's failure, not the trainer's: kept as the reason beside the word.
FAILURE_STATES = {"TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                  "PREEMPTED", "FAILED"}
_SEP = "|"


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about one job. `exit_code`/`signal`: the batch script's end;
    `restarts`: how often it was requeued (None where the source does not say: sacct)."""

    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    restarts: int | None = None


def parse_jobs(output: str) -> dict[str, JobInfo]:
    """Jobs from the `J`, `C` and `A` lines; an earlier source wins over a later one."""
    jobs: dict[str, JobInfo] = {}
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "J":
            parts = rest.split(_SEP)
            if len(parts) < 4 or not parts[0].strip().isdigit():
                continue
            raw = _int(parts[3])
            info = JobInfo(parts[1].strip(), _clean_reason(parts[2]),
                           None if raw is None else (raw >> 8) & 0xFF,
                           None if raw is None else raw & 0x7F,
                           _int(parts[4]) if len(parts) > 4 else None)
            jobs.setdefault(parts[0].strip(), info)
        elif kind == "C":
            facts = dict(w.partition("=")[::2] for w in rest.split(" ") if "=" in w)
            job = facts.get("JobId", "")
            if job.isdigit():
                code, sig = _exit_pair(facts.get("ExitCode", ""))
                jobs.setdefault(job, JobInfo(facts.get("JobState", ""),
                                             _clean_reason(facts.get("Reason", "")), code, sig,
                                             _int(facts.get("Restarts", ""))))
        elif kind == "A":
            parts = rest.split(_SEP)
            if len(parts) >= 3 and parts[0].isdigit():
                code, sig = _exit_pair(parts[2])
                # sacct writes `CANCELLED by 0`: the state is the first word.
                jobs.setdefault(parts[0], JobInfo(parts[1].split(" ")[0], "", code, sig))
    return jobs


def _clean_reason(reason: str) -> str:
    reason = safe_line(reason.strip())[:120]  # host text: shown in the terminal and the TUI
    return "" if reason in ("None", "(null)") else reason


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return _int(code), _int(sig)


def parse_run_states(output: str, count: int, host: str = "the host") -> list[probes.RunProbe]:
    """The status word of each run, from its files first and Slurm's view second.

    - `status` written (the batch script recorded the trainer's exit): that code, with
      Slurm's end state as the reason when it is a failure (TIMEOUT, OUT_OF_MEMORY…).
    - our stop verified (`stopped`), or issued and the job ended: `stopped`.
    - pending: `queued` with Slurm's reason; running-ish: `running`, or `queued` while
      the job's retry loop waits to try again (its reason says why and when); a failed
      run whose loop gave up has why as its reason; a running job's watchdog's stall
      (`stalled: no output for 17m`, `GPUs idle for 12m`) is its reason, also once the
      watchdog stopped the job for it (`--on-stall stop`).
    - ended without an exit recorded: `failed (exit N)` from Slurm's exit code or signal
      when Slurm calls it a failure (the reason says which); else `lost`.
    - a job Slurm no longer knows and nothing recorded: `lost`.
    - no job id yet while its sbatch runs: `starting` (the state rule's word), never `lost`.
    """
    jobs = parse_jobs(output)
    places = _queue_places(output)
    found = {i: _probe_of(facts, jobs, places, host)
             for i, facts in probes.run_facts(output, count).items()}
    probes.check_answered(len(found), count, output, host)
    return [found.get(i, probes.RunProbe(exists=False)) for i in range(count)]


def _queue_places(output: str) -> dict[str, int]:
    """`Q<TAB>ID|PLACE` lines: where each of our waiting jobs stands in its queue."""
    places = {}
    for line in output.splitlines():
        if line.startswith("Q\t"):
            job, _, place = line[2:].partition("|")
            if job.strip() and place.strip().isdigit():
                places[job.strip()] = int(place)
    return places


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _probe_of(facts: Mapping[str, str], jobs: Mapping[str, JobInfo],
              places: Mapping[str, int] | None = None, host: str = "the host") -> probes.RunProbe:
    job_id = facts.get("job", "")
    since, since_attempt = probes.running_since(facts)
    base = probes.RunProbe(
        exists=facts.get("exists") == "1",
        exit_code=_int(facts.get("code", "")),
        stop_requested=facts.get("stop") == "1",
        stopped=facts.get("stopped") == "1",
        launched=facts.get("launched") == "1" or bool(job_id),
        job_id=job_id,
        ended_at=_int(facts.get("ended", "")),  # asked for: engine keeps it once final
        running_since=since, running_attempt=since_attempt,
        retry_waited_s=probes.retry_waited(facts),
        # Its sbatch has not answered yet: `starting` by the state rule, never `lost`.
        submitting=facts.get("submitting") == "1" and not job_id,
    )
    if base.submitting:
        return replace(base, reason=run_state(base.facts)[1])
    if base.exists and not job_id and facts.get("unknown") == "1":
        # sbatch took the run but printed no job id: Slurm may hold it queued. Until its
        # batch script records the id (`slurm_job_id`), nothing can be told; never `lost`.
        return replace(base, launched=False, reason=(
            f"sbatch printed no job id: the job may be queued (check squeue on {host})"))
    if not base.exists or not job_id:
        return base  # not submitted (yet): `unknown`, or `starting` to the engine
    # The watchdog's stall: a running job's why, or why it stopped one (`--on-stall stop`).
    stalled, idle = _int(facts.get("stalled", "")), _int(facts.get("gpus_idle", ""))
    info = jobs.get(job_id)
    if info is None:  # gone from Slurm: the recorded code, our stop, or `lost`
        ended = base.exit_code is not None or base.stopped
        return replace(base, reason=probes.stall_reason(stalled, idle)) if ended else base
    # A requeued job (preempted, `scontrol requeue`, a node failure) runs run.sbatch again:
    # the `status` its earlier attempt wrote (143: the requeue's SIGTERM) is not this run's
    # end. A status with no attempt recorded is the first attempt's.
    attempt = _int(facts.get("attempt", "")) or 0
    if base.exit_code is not None and info.restarts is not None and attempt != info.restarts:
        base = replace(base, exit_code=None)
    state = info.state
    reason = state if state in FAILURE_STATES and state != "FAILED" else ""
    # The job's retry loop: why it waits to try again, or why it gave up (host text).
    retry = safe_line(facts.get("retry", ""))[:300]
    if base.exit_code is not None or base.stopped:
        gave_up = retry if base.exit_code and not base.stopped else ""
        return replace(base, reason=gave_up or probes.stall_reason(stalled, idle) or reason,
                       scheduler_state=state)
    if state in _ACTIVE and retry:
        # Alive, between attempts: waiting as a box's run does, `queued` with why.
        return replace(base, alive=True, queued=True, reason=retry, scheduler_state=state)
    if state in _ACTIVE:
        # Its watchdog's word (a silent log, idle GPUs): `running`, with why, as on a box.
        return replace(base, alive=True, scheduler_state=state, stalled_for=stalled,
                       gpus_idle_for=idle, reason=probes.stall_reason(stalled, idle))
    if state in _PENDING:
        place = (places or {}).get(job_id)
        why = f"{info.reason}, {_ordinal(place)} in the queue" if place else info.reason
        return replace(base, queued=True, reason=why, scheduler_state=state, queue_place=place)
    if state == "CANCELLED" and not base.stop_requested:
        return replace(base, reason="CANCELLED", scheduler_state=state)  # someone else's scancel: lost
    if state in FAILURE_STATES and not base.stop_requested:
        code = info.exit_code or (128 + info.signal if info.signal else 1)
        return replace(base, exit_code=code, reason=reason, scheduler_state=state)
    if state == "COMPLETED" and info.exit_code == 0 and not base.stop_requested:
        return replace(base, exit_code=0, scheduler_state=state)
    return replace(base, scheduler_state=state)


def job_gone(state: str) -> bool:
    """True once the job holds no process any more (COMPLETING still may)."""
    return state not in _ACTIVE and state not in _PENDING


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    nodes: dict[str, str] = field(default_factory=dict)  # node -> state
    gpus_total: int = 0
    gpus_used: int = 0

    def summary(self) -> str:
        states: dict[str, int] = {}
        for s in self.nodes.values():
            states[s] = states.get(s, 0) + 1
        nodes = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        star = "*" if self.default else ""
        return (f"{self.name}{star}: {len(self.nodes)} node(s) ({nodes}); "
                f"GPUs {self.gpus_total - self.gpus_used} free of {self.gpus_total}")


def _gpu_count(gres: str) -> int:
    """`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8`: the number of GPUs in a GRES text."""
    total = 0
    for part in gres.split(","):
        part = part.split("(")[0]
        bits = part.split(":")
        if bits[0] == "gpu" and len(bits) >= 2 and bits[-1].isdigit():
            total += int(bits[-1])
    return total


def parse_partitions(rows: Sequence[str]) -> list[Partition]:
    """`sinfo -N -O` rows (`part|node|state|gres|gres_used|`) into partitions, default first."""
    parts: dict[str, Partition] = {}
    seen: set[tuple[str, str]] = set()
    for row in rows:
        cells = [safe_line(c.strip())[:120] for c in row.split(_SEP)]
        if len(cells) < 5 or not cells[0]:
            continue
        name, node, state, gres, used = cells[:5]
        default = name.endswith("*")
        name = name.rstrip("*")
        p = parts.get(name) or Partition(name, default)
        if (name, node) not in seen:
            seen.add((name, node))
            p = replace(p, nodes={**p.nodes, node: state},
                        gpus_total=p.gpus_total + _gpu_count(gres),
                        gpus_used=p.gpus_used + _gpu_count(used))
        parts[name] = p
    # sinfo -N lists by node: show the default partition first, then by name.
    return sorted(parts.values(), key=lambda p: (not p.default, p.name))


def parse_preflight(host: str, output: str, python: str, options: SlurmOptions) -> probes.PreflightReport:
    """Checks for a login node: Slurm reachable, the partition exists, GPUs in it; python as a warning."""
    values = probes.parse_key_values(output)
    facts = {k: safe_line(v) for k, v in values}
    node_rows = [v for k, v in values if k == "node"]
    job_rows = [safe_line(v) for k, v in values if k == "job"]
    checks: list[probes.Check] = []
    py = facts.get("python", "missing")[:200]
    if py[:1].isdigit():
        checks.append(probes.Check("python", True, f"{python} {py} on the login node"))
    else:
        checks.append(probes.Check("python", False, f"{python} does not run on the login node "
                                   f"(compute nodes may differ): {py}", warning=True))
    trainer_ok = facts.get("trainer") == "ok"
    checks.append(probes.Check("trainer", trainer_ok,
                               "praisonai_train importable on the login node" if trainer_ok else
                               f"praisonai_train is not importable by {python} on the login node "
                               "(compute nodes may differ)", warning=not trainer_ok))
    partitions = parse_partitions(node_rows)
    if facts.get("sbatch") != "yes":
        checks.append(probes.Check("slurm", False, f"no sbatch on {host}: not a Slurm login node"))
    elif not partitions:
        why = safe_line(node_rows[0])[:200] if node_rows else "sinfo listed no partition"
        checks.append(probes.Check("slurm", False, f"sinfo failed: {why}"))
    else:
        checks.append(probes.Check("slurm", True, f"Slurm: {len(partitions)} partition(s)"))
        wanted = [p for p in partitions if p.name in options.partition.split(",")] if options.partition \
            else [p for p in partitions if p.default] or partitions[:1]
        if options.partition and not wanted:
            checks.append(probes.Check("partition", False, f"no partition {options.partition!r} "
                                       f"(there are: {', '.join(p.name for p in partitions)})"))
        for p in partitions:
            checks.append(probes.Check("partition", True, p.summary()))
        if wanted:
            top = max(p.gpus_total // max(1, len(p.nodes)) for p in wanted)
            need = options.gpus_per_node or 0
            if need > top:
                checks.append(probes.Check("gpus", False, f"needs {need} GPU(s) per node, "
                                           f"partition {wanted[0].name} has at most {top}"))
    checks.append(probes.Check("jobs", True, f"{len(job_rows)} job(s) of yours in the queue"))
    try:
        disk_kb = int(facts.get("disk_free_kb", ""))
        checks.append(probes.Check("disk", True, f"{probes.human_kb(disk_kb)} free in workdir"))
    except ValueError:
        disk_kb = None
        checks.append(probes.Check("disk", False, "free disk space unknown", warning=True))
    return probes.PreflightReport(
        host=host, reachable=True, checks=tuple(checks), python_version=py if py[:1].isdigit() else "",
        disk_free_kb=disk_kb, backend="slurm", partitions=tuple(partitions),
        jobs=tuple(job_rows), slurm_login=facts.get("sbatch") == "yes",
    )
