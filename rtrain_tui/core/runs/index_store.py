"""The run index's files on disk: each read without a lock (a rename is atomic) and parsed
only when its bytes changed (its parsed form also kept in `.runs-parsed/`), each written
atomically (temp file, fsync, rename), every write under one exclusive lock that is waited
for at most `lock_timeout` seconds; a file that cannot be used as a whole is never written.

`RunIndex` (core/runs/index.py) is this store with the runs' merge, archive and view on
top; a table's format is core/runs/run_record.py's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomli_w

from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import backend_names, run_record
from rtrain_tui.core.runs.run_record import Document, Entry, document_of, entry_of, record_of
from rtrain_tui.core.safety import validate

LOCK_TIMEOUT = 10.0  # seconds a write waits for the lock: 20 starts at once on a busy 2-core box need ~5


def default_index_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "rtrain-tui" / "runs.toml"


class IndexStore:
    """Reading, caching, locking and writing the index's TOML files (no runs logic)."""

    def __init__(self, path: Path | None = None, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = path or default_index_path()
        self.lock_timeout = lock_timeout
        # Per file, the bytes last parsed (or written) and what they hold. Parsing and
        # checking 2,000 runs costs ~140 ms of CPU; reading and comparing the bytes, well
        # under one. So every caller may read, and only a file that changed is parsed
        # again (keyed by content, not by mtime: nothing another writer does can fool it).
        self._cache: dict[Path, tuple[bytes, Document]] = {}
        self._settled: dict[Path, tuple[tuple[int, int, int, int], Document]] = {}

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

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

    def _read(self, path: Path) -> Document:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return Document({}, [], [], {})
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
            return Document({}, [], [], {})
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

    def _parse(self, path: Path, raw: bytes) -> Document:
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
        entries = [entry_of(table) for table in tables]
        return document_of(data, entries, path.name)

    # The parsed form on disk: JSON of the file's data and which tables are usable,
    # keyed by a hash of the TOML's bytes (hashing 5 MB: ~10 ms; parsing them: ~1.2 s).
    # A cache is only ever a shortcut: one that is missing, old or unreadable is
    # ignored, and the TOML is parsed. Small files (a start's live file) are not worth it.
    @property
    def _parsed_dir(self) -> Path:
        return self.path.with_name(f".{self.path.stem}-parsed")

    def _recall(self, path: Path, raw: bytes) -> Document | None:
        if len(raw) < _PERSIST_BYTES:
            return None
        try:
            saved = json.loads((self._parsed_dir / f"{path.name}.json").read_bytes())
            if saved.get("key") != _cache_key(raw):
                return None
            data, usable = saved["data"], saved["usable"]
            tables = data.get("runs", [])
            entries = [Entry(record_of(t) if ok else None, t)
                       for t, ok in zip(tables, usable, strict=True)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return document_of(data, entries, path.name)

    def _persist(self, path: Path, raw: bytes, doc: Document) -> None:
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


_SETTLED_S = 1.0  # a file older than this was not written within the clock's tick
_PERSIST_BYTES = 8 * 1024  # ~20 runs: below this, parsing costs less than the cache
_CACHE_FORMAT = 1
_rules: list[str] = []


def _cache_key(raw: bytes) -> str:
    """The TOML's hash, and that of the code that judges its tables (this module, the
    record's table rules and the validators they call): a cached verdict never outlives the rules that gave it."""
    if not _rules:
        code = hashlib.sha256()
        for module in (__file__, run_record.__file__, validate.__file__, remote_sh.__file__,
                       backend_names.__file__):
            code.update(Path(module).read_bytes())
        _rules.append(code.hexdigest()[:16])
    return f"{_CACHE_FORMAT}:{_rules[0]}:{hashlib.sha256(raw).hexdigest()}"
