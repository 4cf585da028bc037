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

Read once, write little (a year of runs is ~10,000 of them, ~5 MB of TOML that takes
~1.2 s to parse and check and ~0.5 s to write): `runs.toml` holds the runs that can still
change; a run whose state is final moves, on the next write, to the archive of the month
it started in (`runs-2026-11.toml`, beside it), which changes rarely. So a write rewrites
the live file (a hundred runs) and at most the archive a run ended into, and the lock is
held for milliseconds. Each file's parsed form is kept on disk too (`.runs-parsed/`,
JSON, keyed by a hash of the file's bytes), so a new process (`runs`, `status`) reads a
year of runs in tens of milliseconds. An older single-file index is read as it is and
migrated by its first write, every table kept. An archive that cannot be read is
reported (a problem line), never written, and the live runs work without it. A run
recorded in two files (a write cut off between its two renames, or a run id used again)
is read once: from the file whose copy is newer (started, then updated), the archive's
on a tie, since a move writes the archive first.

Times are ISO 8601 in UTC (`utc_now()`, microsecond precision); older second-precision
values still compare correctly because comparisons parse them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import time
import tomllib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tomli_w

from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError, ValidationError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.backend_names import BACKENDS
from rtrain_tui.core.safety import validate

RunKey = tuple[str, str, str]  # (host, workdir, run_id)
StateUpdate = tuple[str, bool, str]  # (state, stale, updated_at)
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


@dataclass(frozen=True)
class _View:
    """Every file of the index as read: the live file last, the archives before it."""

    files: dict[Path, _Document]  # archives by month, then the live file
    records: list[RunRecord]  # the usable runs, each once, in file order
    problems: list[str]
    losers: dict[Path, frozenset[RunKey]]  # runs a file holds that another file's copy shadows
    broken: frozenset[Path]  # archives that cannot be read: never written
    by_key: dict[RunKey, RunRecord] | None  # None if a key repeats within a file


class RunIndex:
    def __init__(self, path: Path | None = None, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = path or default_index_path()
        self.lock_timeout = lock_timeout
        # Per file, the bytes last parsed (or written) and what they hold. Parsing and
        # checking 2,000 runs costs ~140 ms of CPU; reading and comparing the bytes, well
        # under one. So every caller may read, and only a file that changed is parsed
        # again (keyed by content, not by mtime: nothing another writer does can fool it).
        self._cache: dict[Path, tuple[bytes, _Document]] = {}
        self._settled: dict[Path, tuple[tuple[int, int, int, int], _Document]] = {}
        self._last_view: tuple[tuple[tuple[Path, int], ...], _View] | None = None

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def archive_path(self, month: str) -> Path:
        """The archive of the runs that started in `month` (`2026-11`)."""
        return self.path.with_name(f"{self.path.stem}-{month}{self.path.suffix}")

    def archives(self) -> list[Path]:
        """The archive files there are, oldest month first."""
        pattern = f"{self.path.stem}-[0-9][0-9][0-9][0-9]-[0-9][0-9]{self.path.suffix}"
        try:
            return sorted(self.path.parent.glob(pattern))
        except OSError:
            return []

    # -- reading ---------------------------------------------------------------------
    def load(self) -> list[RunRecord]:
        """The usable runs, in file order. Raises IndexCorruptError for an unusable file."""
        return self.load_report().records

    def load_report(self) -> IndexReport:
        """The usable runs and, one line each, the records skipped (they stay in the file)
        and the archives that could not be read (left as they are)."""
        view = self._view()
        return IndexReport(list(view.records), list(view.problems))

    def load_live(self) -> list[RunRecord]:
        """The runs of the live file alone: every run that can still change (and ended
        ones not yet archived), without reading a year of archives."""
        return _records(self._read(self.path))

    def problems(self) -> list[str]:
        """One line per record that `load()` skips, naming its position and field."""
        return list(self._view().problems)

    def get(self, host: str, run_id: str) -> RunRecord | None:
        """The run `run_id` on `host`; the live file is asked first (it is small), then the
        archives newest first (see `find`), so a recent run costs a file or two."""
        for path in (self.path, *reversed(self.archives())):
            try:
                doc = self._read(path)
            except IndexCorruptError:
                if path == self.path:
                    raise
                continue  # its runs are not read (load_report says so)
            for rec in reversed(_records(doc)):  # a later copy is the newer one
                if rec.host == host and rec.run_id == run_id:
                    return rec
        return None

    def find(self, keys: Collection[RunKey]) -> list[RunRecord]:
        """The runs of `keys` the index holds, as `load()` reads them, from as few files
        as it takes: the live file, then the archives newest month first until each is
        found. `status HOST RUN` of a run that ended last week reads two files, not a
        year of them.

        A run gets into an archive only by a write that moves it to the archive of the
        month it started in (`_home`), and out of the live file in the same write. So
        of two copies in archives the newer start is in the newer archive, which is
        read first; and only a live run's own start month can hold a copy as new as
        the live one (a write cut off between its two renames): that archive is read
        too, and such a copy (or a key twice in one file) is left to the whole view.
        """
        wanted = set(keys)
        live = self._read(self.path).by_key
        if live is None:
            return self._from_view(wanted)
        found = {k: live[k] for k in wanted & live.keys()}
        in_live = set(found)
        archives = self.archives()
        check: set[Path] = set()  # the start months' archives of the runs found live
        for record in found.values():
            began = parse_time(record.started_at)
            if began is not None:  # (with none, its home is the live file: no archive has it)
                check.add(self.archive_path(f"{began.year:04d}-{began.month:02d}"))
        check &= set(archives)
        for path in reversed(archives):
            missing = wanted - found.keys()
            if not missing and not check:
                break
            check.discard(path)
            try:
                archived = self._read(path).by_key
            except IndexCorruptError:
                continue  # its runs are not read (load_report says so), as in `load()`
            if archived is None or not in_live.isdisjoint(archived.keys()):
                return self._from_view(wanted)
            found.update((k, archived[k]) for k in missing & archived.keys())
        return list(found.values())

    def _from_view(self, keys: set[RunKey]) -> list[RunRecord]:
        return [r for r in self._view().records if r.key in keys]

    def check(self) -> None:
        """Raise IndexCorruptError unless the index can be read and written. Writes nothing.

        Meant for before anything irreversible (a launch), so a broken index is found
        while there is still nothing to lose. Archives are not read: one that is broken
        is reported by `load_report()` and costs no start.
        """
        self._read(self.path)
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
        """Add `record`, or replace the run with its key (in place).

        A run that can still change (a start's) is written to the live file alone: no
        archive is read. Its copy is the newer one, so it shadows an archived run of the
        same key (a run id used again) until the next full write drops that.
        """
        bad = _record_problems(_table(record))
        if bad:
            raise ValidationError(f"run {record.run_id!r} on {record.host!r} cannot be recorded: "
                                  + "; ".join(bad))

        def change(runs: list[RunRecord]) -> list[RunRecord]:
            return [r for r in runs if r.key != record.key] + [record]

        if probes.is_final(record.state):
            self.update(change)
        else:
            self._update_live(change)

    def add_new(self, records: Sequence[RunRecord]) -> list[RunRecord]:
        """Add the records whose key the index does not have yet, in one locked write.

        Returns those added; a run recorded meanwhile by someone else is left as it is.
        """
        for record in records:
            bad = _record_problems(_table(record))
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
        return bool(self.remove_records(key=key))

    def remove_records(self, listed: Sequence[RunRecord] = (), key: RunKey | None = None
                       ) -> list[RunRecord]:
        """Forget exactly the runs `listed` (a run changed since it was listed stays), or
        every run with `key`; in one locked write. Returns those removed."""
        wanted = set(listed)
        removed: list[RunRecord] = []

        def change(runs: list[RunRecord]) -> list[RunRecord]:
            kept = [r for r in runs if r not in wanted and r.key != key]
            removed[:] = [r for r in runs if r in wanted or r.key == key]
            return kept

        self.update(change)
        return list(removed)

    def set_states(self, states: Mapping[RunKey, StateUpdate], observed_at: str | None = None,
                   ended: Mapping[RunKey, str] | None = None,
                   forget: Mapping[RunKey, str] | None = None,
                   backends: Mapping[RunKey, str] | None = None,
                   went_on: Mapping[RunKey, int] | None = None,
                   running: Mapping[RunKey, tuple[int, str] | tuple[int, str, int | None]] | None = None,
                   ) -> None:
        """Apply `{key: (state, stale, updated_at)}`; a stale entry keeps its last state.

        `observed_at` is when the probe that produced `states` started: a run whose state
        changed after that (say, a stop's verdict) is left alone, because the probe could
        not have seen the change. An unchanged state keeps its `updated_at`. `ended`
        gives runs their end time once; one already recorded is never moved. `forget`
        (`{key: token}`) drops entries still `starting` with that token (starts that
        never launched): a new start that took the same run id since has another token.
        `backends` records the backend of entries that have none (older versions').
        `went_on` (`{key: attempts}`) names ended runs that went on after the end recorded
        (resumed elsewhere, retried by the host): their `ended` replaces that end, and
        they take the host's count of attempts (and forget when the attempt before began
        running). `running` (`{key: (attempt, time, waited)}`) gives a run the time its attempt
        began running, kept only while the run is still on that attempt; a later attempt
        of the host's retry loop gives the seconds that loop waited between attempts
        (`retry_wait_s`, left out of its cost), when said. All in one write.
        """
        seen = parse_time(observed_at) if observed_at else None
        ended, forget, backends = ended or {}, forget or {}, backends or {}
        went_on, running = went_on or {}, running or {}

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
                    # A run live again (resumed, maybe from another laptop) has not ended:
                    # the end time kept is the attempt before's, and would stay its forever.
                    new = replace(r, state=state, stale=False, updated_at=when,
                                  ended_at="" if state in (probes.RUNNING, probes.QUEUED)
                                  else r.ended_at)
                else:
                    new = r
                if new is not r and not _changed_since(r, seen):  # times parsed only here
                    r = new
            if ended and key in ended and (not r.ended_at or key in went_on):
                r = r if r.ended_at == ended[key] else replace(r, ended_at=ended[key])
            if went_on and went_on.get(key, r.attempt) > r.attempt:
                r = replace(r, attempt=went_on[key], running_at="", retry_wait_s=0.0)
            if running and key in running and running[key][0] == r.attempt \
                    and r.running_at != running[key][1]:
                r = replace(r, running_at=running[key][1])
            said: tuple[Any, ...] = running.get(key, ())
            waited = said[2] if len(said) == 3 else None
            if waited is not None and said[0] > r.attempt and r.retry_wait_s != waited:
                r = replace(r, retry_wait_s=float(waited))
            if backends and key in backends and not r.backend:
                r = replace(r, backend=backends[key])
            return r

        def merge(runs: list[RunRecord]) -> list[RunRecord]:
            return [new for new in map(apply, runs) if new is not None]

        # The usual refresh changes nothing: tell so from the runs it names alone (one
        # host's, of 2,000), without going through every run in the file. A process
        # that has not read the archives yet (`status HOST RUN`) tells it from the files
        # that hold them (`find`): reading a year of archives for nothing was a fifth of
        # its time. (With the view at hand, as in the app, that is the cheaper way.)
        keys = {*states, *ended, *forget, *backends, *went_on, *running}
        if self._last_view is None and keys:
            named = self.find(keys)
            if len(named) == len(keys) and all(apply(r) is r for r in named):
                return
        by_key = self._view().by_key
        if by_key is not None:
            changed = {k: apply(by_key[k]) for k in keys if k in by_key}
            changed = {k: new for k, new in changed.items() if new is not by_key[k]}
            if not changed:
                return
            # Live runs that stay live (one turned stale, or back; a state word changed):
            # only the live file changes, so only it is gone through and written, not a
            # year of archived runs (a fifth of `runs --refresh` at 10,000 runs).
            live = self._read(self.path).by_key
            if live is not None and all(
                    live.get(k) is by_key[k] and new is not None and not probes.is_final(new.state)
                    for k, new in changed.items()):
                self._update_live(merge)
                return
        self.update(merge)

    def update(self, change: Callable[[list[RunRecord]], list[RunRecord]]) -> None:
        """Re-read, apply `change`, write atomically — all under the lock.

        `change` must be pure: it may run twice (once to learn whether anything changes,
        without the lock, then under it). Skipped records keep their place in their
        file. Only the files whose runs change are written; runs whose state is final
        move to their month's archive (and the live file's ended runs with them).
        """
        view = self._view()
        result = change(list(view.records))
        if _same(view.records, result) and not self._moves(view) or \
                not _changed(view, self._plan(view, result)):
            return  # a no-op needs no lock and no write
        self._mkdir()
        with self._locked():
            view = self._view()
            self._write_plan(view, self._plan(view, change(list(view.records))))

    # -- internals -------------------------------------------------------------------
    def _corrupt(self, what: str, path: Path | None = None) -> IndexCorruptError:
        what = " ".join(what.split())  # one line, whatever the parser said
        return IndexCorruptError(
            f"the run index {path or self.path} {what}; it was left untouched: "
            "fix or move it away, or pass --index to use another file."
        )

    def _mkdir(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._corrupt(f"cannot be written ({exc.strerror or exc})") from None

    def _update_live(self, change: Callable[[list[RunRecord]], list[RunRecord]]) -> None:
        """`update`, for a change that concerns the live file's runs alone. A live file
        that holds ended runs (an older index; or an ended run whose archive is broken)
        takes the full path, which moves them."""
        doc = self._read(self.path)
        if any(e.record is not None and self._home(e.record, frozenset()) != self.path
               for e in doc.entries):
            self.update(change)
            return
        result = change(_records(doc))
        if _same(_records(doc), result) or _merge(doc, result, self.path.name).data == doc.data:
            return
        self._mkdir()
        with self._locked():
            doc = self._read(self.path)
            merged = _merge(doc, change(_records(doc)), self.path.name)
            if merged.data != doc.data:
                raw = self._write(self.path, merged.data)
                self._cache[self.path] = (raw, merged)
                self._persist(self.path, raw, merged)

    def _home(self, record: RunRecord, broken: frozenset[Path]) -> Path:
        """The file `record` belongs in: its start month's archive once its state is
        final (unless that archive cannot be read), else the live file."""
        if probes.is_final(record.state):
            began = parse_time(record.started_at)
            if began is not None:
                archive = self.archive_path(f"{began.year:04d}-{began.month:02d}")
                if archive not in broken:
                    return archive
        return self.path

    def _moves(self, view: _View) -> bool:
        """The live file holds runs that belong in an archive (an older index: its first
        write migrates it), or a copy another file shadows."""
        live = view.files.get(self.path)
        return bool(view.losers) or live is not None and any(
            e.record is not None and self._home(e.record, view.broken) != self.path
            for e in live.entries)

    def _plan(self, view: _View, result: list[RunRecord]) -> dict[Path, list[_Entry]]:
        """Each file's entries once `result` is written; unusable tables stay in their
        file, an unchanged run keeps its table byte for byte wherever it goes."""
        matcher = _Matcher(result)
        plan: dict[Path, list[_Entry]] = {path: [] for path in view.files}
        plan.setdefault(self.path, [])
        for path, doc in view.files.items():
            shadowed = view.losers.get(path, frozenset())
            for entry in doc.entries:
                if entry.record is None:
                    plan[path].append(entry)
                    continue
                if entry.record.key in shadowed:
                    continue  # another file holds the newer copy: this one goes
                kept = matcher.kept(entry)
                if kept is None:
                    continue  # removed by `change`
                home = path if kept.record is None else self._home(kept.record, view.broken)
                plan.setdefault(home, []).append(kept)
        for rec in matcher.new():
            plan.setdefault(self._home(rec, view.broken), []).append(_entry(_table(rec)))
        return plan

    def _write_plan(self, view: _View, plan: dict[Path, list[_Entry]]) -> None:
        """Write the files `plan` changes, so that a crash anywhere loses no run: files
        that gain runs first (keeping, for now, those moving out of them), then the rest.
        A run may be in two files for a moment; a read takes one copy."""
        old = {path: view.files.get(path, _EMPTY) for path in plan}
        changed = _changed(view, plan)
        keys = {path: {e.record.key for e in entries if e.record is not None}
                for path, entries in plan.items()}
        staying = set().union(*keys.values())
        for path in changed:  # first: the files that gain runs
            had = {e.record.key for e in old[path].entries if e.record is not None}
            if keys[path] - had:
                leaving = [e for e in old[path].entries if e.record is not None
                           and e.record.key not in keys[path] and e.record.key in staying]
                self._store(path, old[path], plan[path] + leaving)
        for path in changed:  # then each file as planned (a no-op where it already is)
            self._store(path, old[path], plan[path])

    def _store(self, path: Path, old: _Document, entries: list[_Entry]) -> None:
        """Write one file with `entries` as its runs (its other keys kept), unless it
        already holds them; an archive left with nothing in it is removed."""
        data = {k: v for k, v in old.data.items() if k != "runs"}
        if entries:  # no `runs = []`: a hand-appended [[runs]] table must still parse
            data["runs"] = [e.table for e in entries]
        doc = _document(data, entries, path.name)
        current = self._cache.get(path)
        if current is not None and current[1].data == data:
            return
        if path != self.path and not entries and set(data) <= {"runs"}:
            path.unlink(missing_ok=True)
            self._cache.pop(path, None)
            (self._parsed_dir / f"{path.name}.json").unlink(missing_ok=True)
            return
        raw = self._write(path, data)
        self._cache[path] = (raw, doc)
        self._persist(path, raw, doc)

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

    def _view(self) -> _View:
        """Every file, read (each parsed only when it changed) and put together."""
        files: dict[Path, _Document] = {}
        problems: list[str] = []
        broken: set[Path] = set()
        for path in self.archives():
            try:
                files[path] = self._read(path)
            except IndexCorruptError as exc:
                broken.add(path)
                problems.append(f"{exc} Its runs are not shown; the live runs are.")
        files[self.path] = self._read(self.path)
        docs = tuple((path, id(doc)) for path, doc in files.items())
        if self._last_view is not None and self._last_view[0] == docs and not problems:
            return self._last_view[1]  # nothing changed since: not put together again
        # A run in two files: the newer copy (started, then updated) is read, the
        # archive's on a tie (a move writes the archive first). Told by set sizes first:
        # going through 10,000 runs one by one costs more than the rest of a read.
        keysets = [doc.by_key.keys() if doc.by_key is not None
                   else {e.record.key for e in doc.entries if e.record is not None}
                   for doc in files.values()]
        losers: dict[Path, set[RunKey]] = {}
        if sum(map(len, keysets)) != len(set().union(*keysets)):
            losers = self._losers(files)
        records = [e.record for path, doc in files.items() for e in doc.entries
                   if e.record is not None and e.record.key not in losers.get(path, ())]
        by_key: dict[RunKey, RunRecord] | None = {}
        for doc in files.values():
            if by_key is not None and doc.by_key is not None:
                by_key.update(doc.by_key)
            else:
                by_key = None
        if losers:
            by_key = {r.key: r for r in records}
            if len(by_key) != len(records):
                by_key = None
        for doc in files.values():
            problems.extend(doc.problems)
        view = _View(files, records, problems, {p: frozenset(k) for p, k in losers.items()},
                     frozenset(broken), by_key)
        self._last_view = (docs, view)
        return view

    def _losers(self, files: dict[Path, _Document]) -> dict[Path, set[RunKey]]:
        """Per file, the runs it holds whose copy in another file is the one read."""
        copies: dict[RunKey, dict[Path, RunRecord]] = {}
        for path, doc in files.items():
            for entry in doc.entries:
                if entry.record is not None:
                    copies.setdefault(entry.record.key, {}).setdefault(path, entry.record)
        losers: dict[Path, set[RunKey]] = {}
        for key, found in copies.items():
            if len(found) > 1:
                best = max(found, key=lambda path: (
                    parse_time(found[path].started_at) or _EPOCH,
                    parse_time(found[path].updated_at) or _EPOCH, path != self.path))
                for path in found:
                    if path != best:
                        losers.setdefault(path, set()).add(key)
        return losers

    def _read(self, path: Path) -> _Document:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return _Document({}, [], [], {})
        except OSError as exc:
            raise self._corrupt(f"cannot be read ({exc.strerror or exc})", path) from None
        if stat.S_ISDIR(st.st_mode):
            raise self._corrupt("is a directory, not a file", path)
        if not stat.S_ISREG(st.st_mode):
            raise self._corrupt("is not a regular file", path)  # a FIFO would block the read forever
        # A file unchanged since a read that found it already a second old is not read
        # again (a year of archives is 5 MB, read several times a refresh): any write
        # since would have given it another mtime, size or inode. One younger than that
        # could be rewritten within the clock's tick, so its bytes are compared.
        seen = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        settled = self._settled.get(path)
        if settled is not None and settled[0] == seen:
            return settled[1]
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return _Document({}, [], [], {})
        except OSError as exc:
            raise self._corrupt(f"cannot be read ({exc.strerror or exc})", path) from None
        cached = self._cache.get(path)
        if cached is not None and cached[0] == raw:
            doc = cached[1]
        else:
            recalled = self._recall(path, raw)
            if recalled is None:
                doc = self._parse(path, raw)
                self._persist(path, raw, doc)
            else:
                doc = recalled
            self._cache[path] = (raw, doc)
        if time.time() - st.st_mtime > _SETTLED_S and len(raw) == st.st_size:
            self._settled[path] = (seen, doc)
        else:
            self._settled.pop(path, None)
        return doc

    def _parse(self, path: Path, raw: bytes) -> _Document:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._corrupt(f"is not UTF-8 text (bad byte at offset {exc.start})", path) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise self._corrupt(f"is not valid TOML ({exc})", path) from None
        tables = data.get("runs", [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise self._corrupt("has a `runs` that is not a list of [[runs]] tables", path)
        entries = [_entry(table) for table in tables]
        return _document(data, entries, path.name)

    # The parsed form on disk: JSON of the file's data and which tables are usable,
    # keyed by a hash of the TOML's bytes (hashing 5 MB: ~10 ms; parsing them: ~1.2 s).
    # A cache is only ever a shortcut: one that is missing, old or unreadable is
    # ignored, and the TOML is parsed. Small files (a start's live file) are not worth it.
    @property
    def _parsed_dir(self) -> Path:
        return self.path.with_name(f".{self.path.stem}-parsed")

    def _recall(self, path: Path, raw: bytes) -> _Document | None:
        if len(raw) < _PERSIST_BYTES:
            return None
        try:
            saved = json.loads((self._parsed_dir / f"{path.name}.json").read_bytes())
            if saved.get("key") != _cache_key(raw):
                return None
            data, usable = saved["data"], saved["usable"]
            tables = data.get("runs", [])
            entries = [_Entry(_record(t) if ok else None, t)
                       for t, ok in zip(tables, usable, strict=True)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return _document(data, entries, path.name)

    def _persist(self, path: Path, raw: bytes, doc: _Document) -> None:
        if len(raw) < _PERSIST_BYTES:
            return
        try:
            text = json.dumps({"key": _cache_key(raw), "data": doc.data,
                               "usable": [e.record is not None for e in doc.entries]})
        except (TypeError, ValueError):
            return  # a TOML date-time kept verbatim has no JSON form: parse that file
        try:
            self._parsed_dir.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._parsed_dir, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, self._parsed_dir / f"{path.name}.json")
        except OSError:
            pass  # no cache: the next process parses the TOML, as it always could

    def _write(self, path: Path, data: dict[str, Any]) -> bytes:
        """Write `data` atomically; returns the bytes the file now holds."""
        raw = tomli_w.dumps(data).encode("utf-8")
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".runs.", suffix=".tmp")
        except OSError as exc:
            raise self._corrupt(f"cannot be written ({exc.strerror or exc})", path) from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return raw


_EPOCH = datetime.fromtimestamp(0, UTC)
_SETTLED_S = 1.0  # a file older than this was not written within the clock's tick
_EMPTY = _Document({}, [], [], {})
_PERSIST_BYTES = 8 * 1024  # ~20 runs: below this, parsing costs less than the cache
_CACHE_FORMAT = 1
_rules: list[str] = []


def _cache_key(raw: bytes) -> str:
    """The TOML's hash, and that of the code that judges its tables (this module and the
    validators it calls): a cached verdict never outlives the rules that gave it."""
    if not _rules:
        code = hashlib.sha256()
        for module in (__file__, validate.__file__, remote_sh.__file__):
            code.update(Path(module).read_bytes())
        _rules.append(code.hexdigest()[:16])
    return f"{_CACHE_FORMAT}:{_rules[0]}:{hashlib.sha256(raw).hexdigest()}"


PRUNABLE = ("completed", "failed", "stopped", "lost")  # `failed` covers `failed (exit N)`


def parse_age(text: str) -> timedelta:
    """`90d`, `12w`, `36h` as a duration; ValidationError otherwise."""
    match = re.fullmatch(r"(\d{1,6})([hdw])", text.strip())
    if not match:
        raise ValidationError(f"--older-than {text!r} is not an age: a number and h, d or w "
                              "(hours, days, weeks), e.g. 90d.")
    hours = {"h": 1, "d": 24, "w": 24 * 7}[match.group(2)]
    return timedelta(hours=int(match.group(1)) * hours)


def prunable(records: Sequence[RunRecord], older_than: timedelta,
             states: Sequence[str] = PRUNABLE, now: datetime | None = None) -> list[RunRecord]:
    """The runs whose state is final and one of `states`, that ended more than
    `older_than` before `now`: by their end time, else when their state last changed,
    else when they started. A run with none of those times is never pruned."""
    for state in states:
        if state not in PRUNABLE:
            raise ValidationError(f"--state {state!r}: only runs that ended can be pruned "
                                  f"({', '.join(PRUNABLE)}).")
    cutoff = (now or datetime.now(UTC)) - older_than
    out = []
    for rec in records:
        word = "failed" if rec.state.startswith("failed") else rec.state
        if word not in states or not probes.is_final(rec.state):
            continue
        when = next((t for t in map(parse_time, (rec.ended_at, rec.updated_at, rec.started_at))
                     if t is not None), None)
        if when is not None and when < cutoff:
            out.append(rec)
    return out


def _changed_since(record: RunRecord, seen: datetime | None) -> bool:
    """True when the run's state changed after `seen` (so a probe from then is older news)."""
    if seen is None:
        return False
    changed = parse_time(record.updated_at)
    return changed is not None and changed > seen


def _records(doc: _Document) -> list[RunRecord]:
    return [e.record for e in doc.entries if e.record is not None]


def _changed(view: _View, plan: dict[Path, list[_Entry]]) -> list[Path]:
    """The files whose entries `plan` changes (entries are compared by identity)."""
    changed = []
    for path, entries in plan.items():
        old = view.files.get(path, _EMPTY).entries
        if len(entries) != len(old) or any(a is not b for a, b in zip(entries, old)):
            changed.append(path)
    return changed


def _same(records: list[RunRecord], result: list[RunRecord]) -> bool:
    """`change` gave back the very records it was given: a refresh that changed nothing
    is told apart in well under a millisecond, without merging 2,000 tables."""
    return len(result) == len(records) and all(a is b for a, b in zip(result, records))


class _Matcher:
    """Pairs the runs a file holds with the records a change gave back, by key, in order
    (a key twice in the file pairs with its copies in turn): what `_plan` and `_merge`
    both need to write `result` while keeping every table they can."""

    def __init__(self, result: list[RunRecord]) -> None:
        self._result = result
        self._waiting: dict[RunKey, list[int]] = {}
        for i, rec in enumerate(result):
            self._waiting.setdefault(rec.key, []).append(i)
        self._placed: set[int] = set()

    def kept(self, entry: _Entry) -> _Entry | None:
        """The table a usable `entry` becomes, or None when the change removed its run.
        An unchanged run is written back byte for byte, not with its defaults filled in."""
        assert entry.record is not None
        slots = self._waiting.get(entry.record.key)
        if not slots:
            return None
        i = slots.pop(0)
        self._placed.add(i)
        new = self._result[i]
        if new is entry.record or new == entry.record:
            return entry
        # Unknown fields are kept verbatim; a known one written only when set goes when
        # it is back at its default (a new attempt's `running_at`), never kept stale.
        old = {k: v for k, v in entry.table.items() if k not in _WHEN_SET}
        return _entry({**old, **_table(new)})

    def new(self) -> list[RunRecord]:
        """The records no table was paired with: runs the change added."""
        return [rec for i, rec in enumerate(self._result) if i not in self._placed]


def _merge(doc: _Document, result: list[RunRecord], name: str) -> _Document:
    """The file with `result` as its runs: skipped tables and unknown fields stay where
    they were.

    Built as a read of the written file would find it, so a write need not be parsed
    again: only tables that changed are checked (`name` is the file's, for problems).
    """
    matcher = _Matcher(result)
    entries: list[_Entry] = []
    for entry in doc.entries:
        kept = entry if entry.record is None else matcher.kept(entry)
        if kept is not None:  # None: removed by `change`
            entries.append(kept)
    entries.extend(_entry(_table(rec)) for rec in matcher.new())
    data = {k: v for k, v in doc.data.items() if k != "runs"}
    if entries:  # no `runs = []`: a hand-appended [[runs]] table must still parse
        data["runs"] = [e.table for e in entries]
    return _document(data, entries, name)


def _table(record: RunRecord) -> dict[str, Any]:
    """`dataclasses.asdict(record)`: its fields are scalars, so a shallow copy is the
    same dict, without asdict's deep copy of each value (1.7 of the 3.9 s that adding
    5,000 found runs cost)."""
    table = dict(record.__dict__)
    for name in _WHEN_SET:
        if table[name] == _DEFAULTS[name]:
            del table[name]
    return table


def _entry(table: dict[str, Any]) -> _Entry:
    """One [[runs]] table as read: a record, or None when it is to be skipped."""
    if _record_problems(table):
        return _Entry(None, table)
    return _Entry(_record(table), table)


def _record(table: dict[str, Any]) -> RunRecord:
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


def _problems(entries: Sequence[_Entry], name: str) -> list[str]:
    """One line per skipped table, by its position in the file."""
    return [f"{name}: run #{n}{_name_of(e.table)}: " + "; ".join(_record_problems(e.table))
            + " — skipped, and kept in the file as it is."
            for n, e in enumerate(entries, start=1) if e.record is None]


_TEXT_FIELDS = ("host", "run_id", "workdir", "python", "state", "started_at", "updated_at",
                "ended_at", "origin", "config", "dataset", "token", "gpu_ids", "backend",
                "job_id", "slurm_job_id", "attempt_started_at", "running_at")
_REQUIRED = ("host", "run_id", "workdir")
_KNOWN = frozenset(f.name for f in fields(RunRecord))
_DEFAULTS = {f.name: f.default for f in fields(RunRecord) if f.default is not MISSING}
_WHEN_SET = ("attempt_started_at", "earlier_s", "nodes", "running_at", "retry_wait_s")  # written only when not the default
# Fields older versions wrote under another name: read into the new one (a table that
# has both keeps both, and the new name wins).
_OLD_NAMES = {"slurm_job_id": "job_id"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode's Cc, as a search not a loop


def _record_problems(table: dict[str, Any]) -> list[str]:
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
