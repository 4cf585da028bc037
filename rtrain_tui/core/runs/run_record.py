"""One run as the index records it (`RunRecord`), and its `[[runs]]` table: the one place
that knows a table's fields, which tables are usable (`record_problems`), and how a table
and a record turn into each other, unknown fields kept.

Part of the run index (core/runs/index.py, which re-exports the public names); the
file-level store is core/runs/index_store.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs.backend_names import BACKENDS
from rtrain_tui.core.safety import validate

RunKey = tuple[str, str, str]  # (host, workdir, run_id)
StateUpdate = tuple[str, bool, str]  # (state, stale, updated_at)


def utc_now() -> str:
    """Now, as the index writes times: ISO 8601, UTC, microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_time(text: str) -> datetime | None:
    """An index time as an aware datetime (naive ones are UTC); None when it is not a time."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RunRecord:
    host: str
    run_id: str
    workdir: str
    python: str = "python3"
    state: str = "unknown"
    started_at: str = ""  # ISO 8601, UTC
    updated_at: str = ""  # when `state` last changed (as we saw it)
    ended_at: str = ""  # when the run ended, by the host's clock (its `status` file)
    origin: str = ""  # "found": discovered on the host (started elsewhere), not started here
    stale: bool = False  # the last refresh could not reach the host
    config: str = ""
    dataset: str = ""
    gpus: int = 1  # GPUs it holds on each node (a Slurm job's --gpus-per-node)
    token: str = ""  # the run's marker on the host (train.token), set by start
    gpu_ids: str = ""  # the CUDA_VISIBLE_DEVICES start chose (`0,3`); "" when it chose none
    backend: str = ""  # how it was launched: "direct" (a box) or "slurm"; "" (older
    # versions) means direct for a run started here, the host's setting for a found one
    job_id: str = ""  # a scheduler's job (Slurm: the id sbatch gave); older versions
    # wrote it as `slurm_job_id`, still read
    attempt: int = 1  # a resumed run's attempt (`rtrain-tui resume`): 2 for its second
    # What its cost needs from the index alone (core/runs/cost.py): when a resume's attempt
    # began ("" = with the run), and the seconds the attempts before it ran. Written only
    # when set, so the other runs' tables stay as they were.
    attempt_started_at: str = ""
    earlier_s: float = 0.0
    nodes: int = 1  # nodes it holds (a multi-node Slurm job): GPUs held = nodes × gpus
    # When its current attempt got its GPUs (a `--queue` run) or left Slurm's queue, by the
    # host's clock, as a refresh read it ("" = not known, or not waited): cost counts from
    # then (core/runs/cost.py), so the index alone leaves the wait out too.
    running_at: str = ""
    # The seconds the host's retry loop waited between the attempts of its current run
    # (core/host/retry.sh), as a refresh read it: left out of the cost, as `status` does.
    retry_wait_s: float = 0.0

    @property
    def key(self) -> RunKey:
        return (self.host, self.workdir, self.run_id)


@dataclass(frozen=True)
class IndexReport:
    """What `load_report()` found: the usable runs, and one line per record it skipped."""

    records: list[RunRecord]
    problems: list[str]


@dataclass(frozen=True)
class Entry:
    record: RunRecord | None  # None: the table is kept, but it is not a usable run
    table: dict[str, Any]  # exactly as read


@dataclass(frozen=True)
class Document:
    data: dict[str, Any]  # the whole file as read ({} when there is none)
    entries: list[Entry]
    problems: list[str]
    by_key: dict[RunKey, RunRecord] | None = None  # the runs by key; None if a key repeats


def document_of(data: dict[str, Any], entries: list[Entry], name: str) -> Document:
    records = [e.record for e in entries if e.record is not None]
    by_key = {r.key: r for r in records}
    return Document(data, entries, table_problems(entries, name),
                     by_key if len(by_key) == len(records) else None)


EMPTY = Document({}, [], [], {})


def records_of(doc: Document) -> list[RunRecord]:
    return [e.record for e in doc.entries if e.record is not None]


def table_of(record: RunRecord) -> dict[str, Any]:
    """`dataclasses.asdict(record)`: its fields are scalars, so a shallow copy is the
    same dict, without asdict's deep copy of each value (1.7 of the 3.9 s that adding
    5,000 found runs cost)."""
    table = dict(record.__dict__)
    for name in WHEN_SET:
        if table[name] == _DEFAULTS[name]:
            del table[name]
    return table


def entry_of(table: dict[str, Any]) -> Entry:
    """One [[runs]] table as read: a record, or None when it is to be skipped."""
    if record_problems(table):
        return Entry(None, table)
    return Entry(record_of(table), table)


def record_of(table: dict[str, Any]) -> RunRecord:
    """A usable table's run (fields this version does not know are left out, fields
    under an older name read into the new one)."""
    if _KNOWN.issuperset(table):
        # The usual table (known fields, current names, checked): filled in one step, not
        # a frozen __init__'s 17 object.__setattr__ calls (60 of the 150 ms that reading
        # 10,000 runs from the parsed form costs).
        record = object.__new__(RunRecord)
        record.__dict__.update(_DEFAULTS)
        record.__dict__.update(table)
        return record
    values = {new: table[old] for old, new in _OLD_NAMES.items() if old in table and new not in table}
    values.update({k: v for k, v in table.items() if k in _KNOWN})
    return RunRecord(**values)


def table_problems(entries: Sequence[Entry], name: str) -> list[str]:
    """One line per skipped table, by its position in the file."""
    return [f"{name}: run #{n}{_name_of(e.table)}: " + "; ".join(record_problems(e.table))
            + " — skipped, and kept in the file as it is."
            for n, e in enumerate(entries, start=1) if e.record is None]


_TEXT_FIELDS = ("host", "run_id", "workdir", "python", "state", "started_at", "updated_at",
                "ended_at", "origin", "config", "dataset", "token", "gpu_ids", "backend",
                "job_id", "slurm_job_id", "attempt_started_at", "running_at")


_REQUIRED = ("host", "run_id", "workdir")
_KNOWN = frozenset(f.name for f in fields(RunRecord))
_DEFAULTS = {f.name: f.default for f in fields(RunRecord) if f.default is not MISSING}
WHEN_SET = ("attempt_started_at", "earlier_s", "nodes", "running_at", "retry_wait_s")  # written only when not the default


# Fields older versions wrote under another name: read into the new one (a table that
# has both keeps both, and the new name wins).
_OLD_NAMES = {"slurm_job_id": "job_id"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode's Cc, as a search not a loop


def record_problems(table: dict[str, Any]) -> list[str]:
    """What makes one [[runs]] table unusable, one phrase per field; [] when it is fine."""
    bad = [f"{name} is missing" for name in _REQUIRED if name not in table]
    for name in _TEXT_FIELDS:
        if name not in table:
            continue
        value = table[name]
        if not isinstance(value, str):
            bad.append(f"{name} should be text, not {_describe(value)}")
        elif _CONTROL.search(value):
            bad.append(f"{name} {value!r} contains control characters")
    if "stale" in table and not isinstance(table["stale"], bool):
        bad.append(f"stale should be true or false, not {_describe(table['stale'])}")
    if "gpus" in table and (isinstance(table["gpus"], bool) or not isinstance(table["gpus"], int)
                            or table["gpus"] < 0):
        bad.append(f"gpus should be a whole number 0 or more, not {_describe(table['gpus'])}")
    if "attempt" in table and (isinstance(table["attempt"], bool)
                               or not isinstance(table["attempt"], int) or table["attempt"] < 1):
        bad.append(f"attempt should be a whole number 1 or more, not {_describe(table['attempt'])}")
    if "nodes" in table and (isinstance(table["nodes"], bool)
                             or not isinstance(table["nodes"], int) or table["nodes"] < 1):
        bad.append(f"nodes should be a whole number 1 or more, not {_describe(table['nodes'])}")
    for name in ("earlier_s", "retry_wait_s"):
        if name in table and (isinstance(table[name], bool) or not isinstance(
                table[name], int | float) or not 0 <= table[name] < 1e10):
            bad.append(f"{name} should be a number of seconds, not {_describe(table[name])}")
    if bad:
        return bad
    # Values that reach a remote shell or asyncssh: refused here so one bad record can
    # never fail a whole host's probe.
    for name, check in (("host", validate.check_host), ("run_id", validate.check_run_id),
                        ("workdir", lambda v: validate.check_workdir(table["host"], v))):
        try:
            check(table[name])
        except ValidationError:
            bad.append(f"{name} {table[name]!r} is not usable")
    if table.get("token"):
        try:
            remote_sh.check_token(table["token"])  # it names a lock file and reaches scripts
        except ValueError:
            bad.append(f"token {table['token'][:40]!r} is not usable (lowercase hex expected)")
    if table.get("backend", "") not in ("", *BACKENDS):
        bad.append(f"backend {table['backend'][:40]!r} is not one of {', '.join(BACKENDS)}")
    return bad


def _describe(value: object) -> str:
    kinds = {bool: "a boolean", int: "a number", float: "a number", list: "an array",
             dict: "a table", datetime: "a TOML date-time"}
    kind = next((k for t, k in kinds.items() if isinstance(value, t)), "a TOML date or time")
    shown = repr(value) if isinstance(value, (bool, int, float)) else ""
    if isinstance(value, list):
        shown = repr(value)[:40]
    return f"{kind} ({shown})" if shown else kind


def _name_of(table: dict[str, Any]) -> str:
    host, run_id = table.get("host"), table.get("run_id")
    if isinstance(host, str) and isinstance(run_id, str):
        return f" ({host!r}/{run_id!r})"
    if isinstance(run_id, str):
        return f" ({run_id!r})"
    return ""
