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

In four modules: this one (the runs: reading a view of every file, merging a change,
moving ended runs to their archive), core/runs/index_store.py (the files: read, parse
cache, lock, atomic write), core/runs/run_record.py (a run and its [[runs]] table) and
core/runs/prune.py; the public names of all of them are importable from here.

Times are ISO 8601 in UTC (`utc_now()`, microsecond precision); older second-precision
values still compare correctly because comparisons parse them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtrain_tui.core.errors import IndexCorruptError, ValidationError
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index_store import LOCK_TIMEOUT, IndexStore, default_index_path
from rtrain_tui.core.runs.prune import PRUNABLE, parse_age, prunable
from rtrain_tui.core.runs.run_record import (
    EMPTY,
    WHEN_SET,
    Document,
    Entry,
    IndexReport,
    RunKey,
    RunRecord,
    StateUpdate,
    document_of,
    entry_of,
    parse_time,
    record_problems,
    records_of,
    table_of,
    utc_now,
)

__all__ = [
    "LOCK_TIMEOUT", "PRUNABLE", "STARTING", "IndexReport", "RunIndex", "RunKey", "RunRecord",
    "StateUpdate", "default_index_path", "parse_age", "parse_time", "prunable", "utc_now",
]

STARTING = "starting"  # probes.STARTING: an entry whose start may not have launched yet


@dataclass(frozen=True)
class _View:
    """Every file of the index as read: the live file last, the archives before it."""

    files: dict[Path, Document]  # archives by month, then the live file
    records: list[RunRecord]  # the usable runs, each once, in file order
    problems: list[str]
    losers: dict[Path, frozenset[RunKey]]  # runs a file holds that another file's copy shadows
    broken: frozenset[Path]  # archives that cannot be read: never written
    by_key: dict[RunKey, RunRecord] | None  # None if a key repeats within a file


class RunIndex(IndexStore):
    def __init__(self, path: Path | None = None, lock_timeout: float = LOCK_TIMEOUT) -> None:
        super().__init__(path, lock_timeout)
        self._last_view: tuple[tuple[tuple[Path, int], ...], _View] | None = None

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
        return records_of(self._read(self.path))

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
            for rec in reversed(records_of(doc)):  # a later copy is the newer one
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
        bad = record_problems(table_of(record))
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
            bad = record_problems(table_of(record))
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

    def _update_live(self, change: Callable[[list[RunRecord]], list[RunRecord]]) -> None:
        """`update`, for a change that concerns the live file's runs alone. A live file
        that holds ended runs (an older index; or an ended run whose archive is broken)
        takes the full path, which moves them."""
        doc = self._read(self.path)
        if any(e.record is not None and self._home(e.record, frozenset()) != self.path
               for e in doc.entries):
            self.update(change)
            return
        result = change(records_of(doc))
        if _same(records_of(doc), result) or _merge(doc, result, self.path.name).data == doc.data:
            return
        self._mkdir()
        with self._locked():
            doc = self._read(self.path)
            merged = _merge(doc, change(records_of(doc)), self.path.name)
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

    def _plan(self, view: _View, result: list[RunRecord]) -> dict[Path, list[Entry]]:
        """Each file's entries once `result` is written; unusable tables stay in their
        file, an unchanged run keeps its table byte for byte wherever it goes."""
        matcher = _Matcher(result)
        plan: dict[Path, list[Entry]] = {path: [] for path in view.files}
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
            plan.setdefault(self._home(rec, view.broken), []).append(entry_of(table_of(rec)))
        return plan

    def _write_plan(self, view: _View, plan: dict[Path, list[Entry]]) -> None:
        """Write the files `plan` changes, so that a crash anywhere loses no run: files
        that gain runs first (keeping, for now, those moving out of them), then the rest.
        A run may be in two files for a moment; a read takes one copy."""
        old = {path: view.files.get(path, EMPTY) for path in plan}
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

    def _store(self, path: Path, old: Document, entries: list[Entry]) -> None:
        """Write one file with `entries` as its runs (its other keys kept), unless it
        already holds them; an archive left with nothing in it is removed."""
        data = {k: v for k, v in old.data.items() if k != "runs"}
        if entries:  # no `runs = []`: a hand-appended [[runs]] table must still parse
            data["runs"] = [e.table for e in entries]
        doc = document_of(data, entries, path.name)
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

    def _view(self) -> _View:
        """Every file, read (each parsed only when it changed) and put together."""
        files: dict[Path, Document] = {}
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

    def _losers(self, files: dict[Path, Document]) -> dict[Path, set[RunKey]]:
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


_EPOCH = datetime.fromtimestamp(0, UTC)


def _changed_since(record: RunRecord, seen: datetime | None) -> bool:
    """True when the run's state changed after `seen` (so a probe from then is older news)."""
    if seen is None:
        return False
    changed = parse_time(record.updated_at)
    return changed is not None and changed > seen


def _changed(view: _View, plan: dict[Path, list[Entry]]) -> list[Path]:
    """The files whose entries `plan` changes (entries are compared by identity)."""
    changed = []
    for path, entries in plan.items():
        old = view.files.get(path, EMPTY).entries
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

    def kept(self, entry: Entry) -> Entry | None:
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
        old = {k: v for k, v in entry.table.items() if k not in WHEN_SET}
        return entry_of({**old, **table_of(new)})

    def new(self) -> list[RunRecord]:
        """The records no table was paired with: runs the change added."""
        return [rec for i, rec in enumerate(self._result) if i not in self._placed]


def _merge(doc: Document, result: list[RunRecord], name: str) -> Document:
    """The file with `result` as its runs: skipped tables and unknown fields stay where
    they were.

    Built as a read of the written file would find it, so a write need not be parsed
    again: only tables that changed are checked (`name` is the file's, for problems).
    """
    matcher = _Matcher(result)
    entries: list[Entry] = []
    for entry in doc.entries:
        kept = entry if entry.record is None else matcher.kept(entry)
        if kept is not None:  # None: removed by `change`
            entries.append(kept)
    entries.extend(entry_of(table_of(rec)) for rec in matcher.new())
    data = {k: v for k, v in doc.data.items() if k != "runs"}
    if entries:  # no `runs = []`: a hand-appended [[runs]] table must still parse
        data["runs"] = [e.table for e in entries]
    return document_of(data, entries, name)
