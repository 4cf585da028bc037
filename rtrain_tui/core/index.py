"""The local index of runs: `runs.toml`, the one place that knows its format.

The host is the source of truth; the index only remembers which runs exist where and
their last known state. Writes re-read the file under an exclusive lock, merge, write a
temp file, fsync and rename, so two processes never lose each other's runs and a crash
never leaves half a file. A file that does not parse is reported and never overwritten.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import tomli_w

from rtrain_tui.core.errors import IndexCorruptError


def default_index_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "rtrain-tui" / "runs.toml"


@dataclass(frozen=True)
class RunRecord:
    host: str
    run_id: str
    workdir: str
    python: str = "python3"
    state: str = "unknown"
    started_at: str = ""  # ISO 8601, UTC
    updated_at: str = ""
    stale: bool = False  # the last refresh could not reach the host
    config: str = ""
    dataset: str = ""
    gpus: int = 1

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.host, self.workdir, self.run_id)


class RunIndex:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_index_path()

    def load(self) -> list[RunRecord]:
        """All runs, oldest first. Raises IndexCorruptError for an unreadable file."""
        return self._parse()

    def get(self, host: str, run_id: str) -> RunRecord | None:
        for rec in self.load():
            if rec.host == host and rec.run_id == run_id:
                return rec
        return None

    def add(self, record: RunRecord) -> None:
        self.update(lambda runs: [r for r in runs if r.key != record.key] + [record])

    def set_states(self, states: dict[tuple[str, str, str], tuple[str, bool, str]]) -> None:
        """Apply `{key: (state, stale, updated_at)}`; a stale entry keeps its last state."""

        def merge(runs: list[RunRecord]) -> list[RunRecord]:
            out = []
            for r in runs:
                if r.key in states:
                    state, stale, when = states[r.key]
                    r = replace(r, stale=True) if stale else replace(r, state=state, stale=False, updated_at=when)
                out.append(r)
            return out

        self.update(merge)

    def update(self, change: Callable[[list[RunRecord]], list[RunRecord]]) -> None:
        """Re-read, apply `change`, write atomically — all under the lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            runs = change(self._parse())
            self._write(runs)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _parse(self) -> list[RunRecord]:
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise IndexCorruptError(
                f"the run index {self.path} is corrupt ({exc}); it was left untouched: "
                "fix or move it away, or pass --index to use another file."
            ) from None
        fields = set(RunRecord.__dataclass_fields__)
        try:
            return [RunRecord(**{k: v for k, v in run.items() if k in fields}) for run in data.get("runs", [])]
        except (TypeError, AttributeError) as exc:
            raise IndexCorruptError(
                f"the run index {self.path} has an unexpected shape ({exc}); it was left untouched."
            ) from None

    def _write(self, runs: list[RunRecord]) -> None:
        text = tomli_w.dumps({"runs": [asdict(r) for r in runs]})
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".runs.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
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
