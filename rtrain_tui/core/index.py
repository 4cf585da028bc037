"""The local index of runs: `runs.toml`, the one place that knows its format.

The host is the source of truth; the index only remembers which runs exist where and
their last known state. Four promises:

- **It never loses data.** Writes re-read the file under an exclusive lock, merge, write
  a temp file, fsync and rename, so two processes never lose each other's runs and a
  crash never leaves half a file. A file that cannot be used as a whole (not TOML, not
  UTF-8, a directory, unreadable, `runs` not a list of tables) raises IndexCorruptError
  and is never overwritten. A single record with wrong types is reported and skipped by
  `load()`, but written back verbatim, as are fields and keys this version does not know.
- **It never freezes.** Reads take no lock (a rename is atomic); a write waits for the
  lock at most `lock_timeout` seconds, then raises IndexBusyError.
- **It never writes for nothing.** A change that leaves the runs as they are writes no
  temp file, fsyncs nothing and renames nothing; an unchanged state keeps its
  `updated_at`, which therefore says when the state last changed.
- **It never parses for nothing.** Parsing and checking 2,000 runs costs ~140 ms of CPU,
  and the app reads the index several times per host every two seconds. Every read
  compares the file's bytes with those last parsed or written (well under a millisecond)
  and parses only a file that changed; a refresh that changes nothing is told so from
  the runs it names. A refresh of three hosts costs ~5 ms of index work, not ~1.4 s.

Times are ISO 8601 in UTC (`utc_now()`, microsecond precision); older second-precision
values still compare correctly because comparisons parse them.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
import tomllib
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomli_w

from rtrain_tui.core import remote_sh, validate
from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError, ValidationError

RunKey = tuple[str, str, str]  # (host, workdir, run_id)
StateUpdate = tuple[str, bool, str]  # (state, stale, updated_at)
BACKENDS = ("direct", "slurm")  # backends.BACKENDS; kept here too, as backends sit above the index
STARTING = "starting"  # probes.STARTING: an entry whose start may not have launched yet
LOCK_TIMEOUT = 10.0  # seconds a write waits for the lock: 20 starts at once on a busy 2-core box need ~5


def default_index_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "rtrain-tui" / "runs.toml"


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
    gpus: int = 1
    token: str = ""  # the run's marker on the host (train.token), set by start
    gpu_ids: str = ""  # the CUDA_VISIBLE_DEVICES start chose (`0,3`); "" when it chose none
    backend: str = ""  # how it was launched: "direct" (a box) or "slurm"; "" (older
    # versions) means direct for a run started here, the host's setting for a found one
    job_id: str = ""  # a scheduler's job (Slurm: the id sbatch gave); older versions
    # wrote it as `slurm_job_id`, still read

    @property
    def key(self) -> RunKey:
        return (self.host, self.workdir, self.run_id)


@dataclass(frozen=True)
class IndexReport:
    """What `load_report()` found: the usable runs, and one line per record it skipped."""

    records: list[RunRecord]
    problems: list[str]


@dataclass(frozen=True)
class _Entry:
    record: RunRecord | None  # None: the table is kept, but it is not a usable run
    table: dict[str, Any]  # exactly as read


@dataclass(frozen=True)
class _Document:
    data: dict[str, Any]  # the whole file as read ({} when there is none)
    entries: list[_Entry]
    problems: list[str]
    by_key: dict[RunKey, RunRecord] | None = None  # the runs by key; None if a key repeats


def _document(data: dict[str, Any], entries: list[_Entry], name: str) -> _Document:
    records = [e.record for e in entries if e.record is not None]
    by_key = {r.key: r for r in records}
    return _Document(data, entries, _problems(entries, name),
                     by_key if len(by_key) == len(records) else None)


class RunIndex:
    def __init__(self, path: Path | None = None, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = path or default_index_path()
        self.lock_timeout = lock_timeout
        # The bytes last parsed (or written) and what they hold. Parsing and checking
        # 2,000 runs costs ~140 ms of CPU; reading and comparing the bytes, well under
        # one. So every caller may read, and only a file that changed is parsed again
        # (keyed by content, not by mtime: nothing another writer does can fool it).
        self._cache: tuple[bytes, _Document] | None = None

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    # -- reading ---------------------------------------------------------------------
    def load(self) -> list[RunRecord]:
        """The usable runs, in file order. Raises IndexCorruptError for an unusable file."""
        return self.load_report().records

    def load_report(self) -> IndexReport:
        """The usable runs and, one line each, the records skipped (they stay in the file)."""
        doc = self._read()
        return IndexReport([e.record for e in doc.entries if e.record is not None], list(doc.problems))

    def problems(self) -> list[str]:
        """One line per record that `load()` skips, naming its position and field."""
        return list(self._read().problems)

    def get(self, host: str, run_id: str) -> RunRecord | None:
        for rec in self.load():
            if rec.host == host and rec.run_id == run_id:
                return rec
        return None

    def check(self) -> None:
        """Raise IndexCorruptError unless the index can be read and written. Writes nothing.

        Meant for before anything irreversible (a launch), so a broken index is found
        while there is still nothing to lose.
        """
        self._read()
        where = self.path.parent
        while not where.exists():
            where = where.parent
        if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
            raise self._corrupt(f"cannot be written: {where} is not a writable directory")
        for path in (self.path, self.lock_path):
            if path.exists() and (not path.is_file() or not os.access(path, os.R_OK | os.W_OK)):
                raise self._corrupt(f"cannot be written: {path} is not a writable file")

    # -- writing ---------------------------------------------------------------------
    def add(self, record: RunRecord) -> None:
        """Add `record`, or replace the run with its key (in place)."""
        bad = _record_problems(asdict(record))
        if bad:
            raise ValidationError(f"run {record.run_id!r} on {record.host!r} cannot be recorded: "
                                  + "; ".join(bad))
        self.update(lambda runs: [r for r in runs if r.key != record.key] + [record])

    def add_new(self, records: Sequence[RunRecord]) -> list[RunRecord]:
        """Add the records whose key the index does not have yet, in one locked write.

        Returns those added; a run recorded meanwhile by someone else is left as it is.
        """
        for record in records:
            bad = _record_problems(asdict(record))
            if bad:
                raise ValidationError(f"run {record.run_id!r} on {record.host!r} cannot be "
                                      "recorded: " + "; ".join(bad))
        added: list[RunRecord] = []

        def change(runs: list[RunRecord]) -> list[RunRecord]:
            have = {r.key for r in runs}
            added[:] = [r for r in records if r.key not in have]
            return runs + added

        self.update(change)
        return list(added)

    def remove(self, key: RunKey) -> bool:
        """Forget the run with `key`; False when there was none (and nothing was written)."""
        found = False

        def change(runs: list[RunRecord]) -> list[RunRecord]:
            nonlocal found
            kept = [r for r in runs if r.key != key]
            found = len(kept) != len(runs)
            return kept

        self.update(change)
        return found

    def set_states(self, states: Mapping[RunKey, StateUpdate], observed_at: str | None = None,
                   ended: Mapping[RunKey, str] | None = None,
                   forget: Mapping[RunKey, str] | None = None,
                   backends: Mapping[RunKey, str] | None = None) -> None:
        """Apply `{key: (state, stale, updated_at)}`; a stale entry keeps its last state.

        `observed_at` is when the probe that produced `states` started: a run whose state
        changed after that (say, a stop's verdict) is left alone, because the probe could
        not have seen the change. An unchanged state keeps its `updated_at`. `ended`
        gives runs their end time once; one already recorded is never moved. `forget`
        (`{key: token}`) drops entries still `starting` with that token (starts that
        never launched): a new start that took the same run id since has another token.
        `backends` records the backend of entries that have none (older versions').
        All in one write.
        """
        seen = parse_time(observed_at) if observed_at else None
        ended, forget, backends = ended or {}, forget or {}, backends or {}

        def apply(r: RunRecord) -> RunRecord | None:
            """`r` as it is to be written (the same object when unchanged), None to drop."""
            key = r.key
            if forget and forget.get(key) == r.token and r.state == STARTING:
                return None
            update = states.get(key)
            if update is not None:
                state, stale, when = update
                if stale:
                    new = r if r.stale else replace(r, stale=True)
                elif (r.state, r.stale) != (state, False):
                    new = replace(r, state=state, stale=False, updated_at=when)
                else:
                    new = r
                if new is not r and not _changed_since(r, seen):  # times parsed only here
                    r = new
            if ended and key in ended and not r.ended_at:
                r = replace(r, ended_at=ended[key])
            if backends and key in backends and not r.backend:
                r = replace(r, backend=backends[key])
            return r

        def merge(runs: list[RunRecord]) -> list[RunRecord]:
            return [new for new in map(apply, runs) if new is not None]

        # The usual refresh changes nothing: tell so from the runs it names alone (one
        # host's, of 2,000), without going through every run in the file.
        by_key = self._read().by_key
        if by_key is not None and all(
                by_key[k] is apply(by_key[k]) for k in {*states, *ended, *forget, *backends}
                if k in by_key):
            return
        self.update(merge)

    def update(self, change: Callable[[list[RunRecord]], list[RunRecord]]) -> None:
        """Re-read, apply `change`, write atomically — all under the lock.

        `change` must be pure: it may run twice (once to learn whether anything changes,
        without the lock, then under it). Skipped records keep their place in the file.
        """
        doc = self._read()
        result = change(_records(doc))
        if _same(doc, result) or _merge(doc, result, self.path.name).data == doc.data:
            return  # a no-op needs no lock and no write
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._corrupt(f"cannot be written ({exc.strerror or exc})") from None
        with self._locked():
            doc = self._read()
            merged = _merge(doc, change(_records(doc)), self.path.name)
            if merged.data != doc.data:
                # What we wrote is what the next read would parse: it is not parsed again.
                self._cache = (self._write(merged.data), merged)

    # -- internals -------------------------------------------------------------------
    def _corrupt(self, what: str) -> IndexCorruptError:
        what = " ".join(what.split())  # one line, whatever the parser said
        return IndexCorruptError(
            f"the run index {self.path} {what}; it was left untouched: "
            "fix or move it away, or pass --index to use another file."
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The exclusive lock, waited for at most `lock_timeout` seconds."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise self._corrupt(f"cannot be locked: {self.lock_path}: {exc.strerror or exc}") from None
        try:
            deadline = time.monotonic() + self.lock_timeout
            delay = 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    # Polled rather than blocking: a blocking flock cannot be given up on.
                    if time.monotonic() >= deadline:
                        raise IndexBusyError(
                            f"the run index {self.path} is locked by another process and has "
                            f"been for {self.lock_timeout:g} s; nothing was written. Try again; "
                            f"if it stays locked, see who holds it with `fuser {self.lock_path}`."
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.02)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _read(self) -> _Document:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return _Document({}, [], [], {})
        except OSError as exc:
            raise self._corrupt(f"cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISDIR(st.st_mode):
            raise self._corrupt("is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise self._corrupt("is not a regular file")  # a FIFO would block the read forever
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _Document({}, [], [], {})
        except OSError as exc:
            raise self._corrupt(f"cannot be read ({exc.strerror or exc})") from None
        cached = self._cache
        if cached is not None and cached[0] == raw:
            return cached[1]
        doc = self._parse(raw)
        self._cache = (raw, doc)
        return doc

    def _parse(self, raw: bytes) -> _Document:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._corrupt(f"is not UTF-8 text (bad byte at offset {exc.start})") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise self._corrupt(f"is not valid TOML ({exc})") from None
        tables = data.get("runs", [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise self._corrupt("has a `runs` that is not a list of [[runs]] tables")
        entries = [_entry(table) for table in tables]
        return _document(data, entries, self.path.name)

    def _write(self, data: dict[str, Any]) -> bytes:
        """Write `data` atomically; returns the bytes the file now holds."""
        raw = tomli_w.dumps(data).encode("utf-8")
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".runs.", suffix=".tmp")
        except OSError as exc:
            raise self._corrupt(f"cannot be written ({exc.strerror or exc})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return raw


def _changed_since(record: RunRecord, seen: datetime | None) -> bool:
    """True when the run's state changed after `seen` (so a probe from then is older news)."""
    if seen is None:
        return False
    changed = parse_time(record.updated_at)
    return changed is not None and changed > seen


def _records(doc: _Document) -> list[RunRecord]:
    return [e.record for e in doc.entries if e.record is not None]


def _same(doc: _Document, result: list[RunRecord]) -> bool:
    """`change` gave back the very records it was given: a refresh that changed nothing
    is told apart in well under a millisecond, without merging 2,000 tables."""
    records = _records(doc)
    return len(result) == len(records) and all(a is b for a, b in zip(result, records))


def _merge(doc: _Document, result: list[RunRecord], name: str) -> _Document:
    """The file with `result` as its runs: skipped tables and unknown fields stay where
    they were.

    Built as a read of the written file would find it, so a write need not be parsed
    again: only tables that changed are checked (`name` is the file's, for problems).
    """
    waiting: dict[RunKey, list[int]] = {}
    for i, rec in enumerate(result):
        waiting.setdefault(rec.key, []).append(i)
    placed: set[int] = set()
    entries: list[_Entry] = []
    for entry in doc.entries:
        if entry.record is None:
            entries.append(entry)
            continue
        slots = waiting.get(entry.record.key)
        if not slots:
            continue  # removed by `change`
        i = slots.pop(0)
        placed.add(i)
        new = result[i]
        # An unchanged run is written back byte for byte, not with its defaults filled in.
        entries.append(entry if new is entry.record or new == entry.record
                       else _entry({**entry.table, **asdict(new)}))
    entries.extend(_entry(asdict(rec)) for i, rec in enumerate(result) if i not in placed)
    data = {k: v for k, v in doc.data.items() if k != "runs"}
    if entries or "runs" in doc.data:
        data["runs"] = [e.table for e in entries]
    return _document(data, entries, name)


def _entry(table: dict[str, Any]) -> _Entry:
    """One [[runs]] table as read: a record, or None when it is to be skipped."""
    if _record_problems(table):
        return _Entry(None, table)
    values = {new: table[old] for old, new in _OLD_NAMES.items() if old in table and new not in table}
    values.update({k: v for k, v in table.items() if k in _KNOWN})
    return _Entry(RunRecord(**values), table)


def _problems(entries: Sequence[_Entry], name: str) -> list[str]:
    """One line per skipped table, by its position in the file."""
    return [f"{name}: run #{n}{_name_of(e.table)}: " + "; ".join(_record_problems(e.table))
            + " — skipped, and kept in the file as it is."
            for n, e in enumerate(entries, start=1) if e.record is None]


_TEXT_FIELDS = ("host", "run_id", "workdir", "python", "state", "started_at", "updated_at",
                "ended_at", "origin", "config", "dataset", "token", "gpu_ids", "backend",
                "job_id", "slurm_job_id")
_REQUIRED = ("host", "run_id", "workdir")
_KNOWN = frozenset(f.name for f in fields(RunRecord))
# Fields older versions wrote under another name: read into the new one (a table that
# has both keeps both, and the new name wins).
_OLD_NAMES = {"slurm_job_id": "job_id"}


def _record_problems(table: dict[str, Any]) -> list[str]:
    """What makes one [[runs]] table unusable, one phrase per field; [] when it is fine."""
    bad = [f"{name} is missing" for name in _REQUIRED if name not in table]
    for name in _TEXT_FIELDS:
        if name not in table:
            continue
        value = table[name]
        if not isinstance(value, str):
            bad.append(f"{name} should be text, not {_describe(value)}")
        elif any(unicodedata.category(c) == "Cc" for c in value):
            bad.append(f"{name} {value!r} contains control characters")
    if "stale" in table and not isinstance(table["stale"], bool):
        bad.append(f"stale should be true or false, not {_describe(table['stale'])}")
    if "gpus" in table and (isinstance(table["gpus"], bool) or not isinstance(table["gpus"], int)
                            or table["gpus"] < 0):
        bad.append(f"gpus should be a whole number 0 or more, not {_describe(table['gpus'])}")
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
