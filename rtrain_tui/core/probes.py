"""Parsers for what the scripts in `remote_sh.py` print, into frozen dataclasses.

Pure functions: no I/O, so every verdict (ready or not, which status word) is unit-tested.
"""

from __future__ import annotations

from dataclasses import dataclass

# The status vocabulary of DESIGN.md. `failed (exit N)` is built by `failed_word`.
RUNNING = "running"
COMPLETED = "completed"
STOPPED = "stopped"
LOST = "lost"
UNKNOWN = "unknown"
UNREACHABLE = "unreachable"
FINAL_STATES = (COMPLETED, STOPPED, LOST)


def failed_word(code: int) -> str:
    return f"failed (exit {code})"


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

    @property
    def why_not(self) -> list[str]:
        if not self.reachable:
            return [self.error]
        return [c.detail for c in self.checks if not c.ok and not c.warning]

    @property
    def ok(self) -> bool:
        return self.reachable and not self.why_not

    def gpu_summary(self) -> str:
        """`2× H200 · 1 busy`, or `no GPU`."""
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
                    "memory_used_mib": g.memory_used_mib,
                    "memory_total_mib": g.memory_total_mib,
                    "utilization_pct": g.utilization_pct,
                }
                for g in self.gpus
            ],
            "python": self.python_version,
            "disk_free_kb": self.disk_free_kb,
            "setsid": self.has_setsid,
        }


def parse_key_values(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            pairs.append((key.strip(), value.strip()))
    return pairs


def _parse_gpu(value: str) -> GpuInfo | None:
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 5:
        return None
    try:
        return GpuInfo(int(parts[0]), parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
    except ValueError:
        return None


def _human_kb(kb: int) -> str:
    size = float(kb) * 1024
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{kb} KiB"  # pragma: no cover - loop always returns


def parse_preflight(host: str, output: str, python: str, gpus_needed: int) -> PreflightReport:
    """Turn the preflight script's output into checks with the seed's wording."""
    values = parse_key_values(output)
    facts = dict(values)
    gpu_list = tuple(g for k, v in values if k == "gpu" and (g := _parse_gpu(v)))
    gpu_errors = [v for k, v in values if k == "gpu" and _parse_gpu(v) is None]
    checks: list[Check] = []

    py = facts.get("python", "missing")
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
    if gpus_needed == 0:
        checks.append(Check("gpus", True, f"CPU-only run; {len(gpu_list)} GPU(s) present"))
    elif smi == "missing":
        checks.append(Check("gpus", False, f"needs {gpus_needed} GPU(s), found 0 (no nvidia-smi)"))
    elif smi != "0" and not gpu_list:
        why = "timed out" if smi == "124" else (gpu_errors[0] if gpu_errors else f"exit {smi}")
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
        checks.append(Check("disk", True, f"{_human_kb(disk_kb)} free in workdir"))
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
    )


@dataclass(frozen=True)
class RunProbe:
    """What one probe of a run dir found; `state` is the status word."""

    exists: bool
    pid: int | None = None
    alive: bool = False
    exit_code: int | None = None
    stop_group: int | None = None  # set once a stop was issued
    group_left: int | None = None  # live members of that group at probe time

    @property
    def state(self) -> str:
        if not self.exists:
            return UNKNOWN
        if self.stop_group is not None:
            return STOPPED if self.group_left == 0 else RUNNING
        if self.exit_code is not None:
            return COMPLETED if self.exit_code == 0 else failed_word(self.exit_code)
        if self.alive:
            return RUNNING
        if self.pid is None:
            return UNKNOWN  # created but never launched: nothing can be told
        return LOST


def _int_or_none(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_run_states(output: str, count: int) -> list[RunProbe]:
    """Parse `run_states` output; a run the script said nothing about is `unknown`."""
    found: dict[int, RunProbe] = {}
    for line in output.splitlines():
        index, *fields = line.split("\t")
        i = _int_or_none(index)
        if i is None or not 0 <= i < count:
            continue
        facts = dict(f.partition("=")[::2] for f in fields)
        found[i] = RunProbe(
            exists=facts.get("exists") == "1",
            pid=_int_or_none(facts.get("pid", "")),
            alive=facts.get("alive") == "1",
            exit_code=_int_or_none(facts.get("code", "")),
            stop_group=_int_or_none(facts.get("stop_group", "")),
            group_left=_int_or_none(facts.get("group_left", "")),
        )
    return [found.get(i, RunProbe(exists=False)) for i in range(count)]
