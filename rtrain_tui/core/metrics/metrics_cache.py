"""The local cache of a run's parsed metrics: byte offsets and the parser's state.

The offsets are how much of `train.log` and of `metrics.jsonl` were parsed. A file from
before metrics.jsonl was read has no `jsonl_offset`: it reads as 0, the log's side kept.

One JSON file per run under `$XDG_CACHE_HOME/rtrain-tui/metrics/`, so reopening a
week-old run reads only what its log gained since. It is a cache: a file that cannot be
read or makes no sense is discarded and the log is parsed again, never an error.
Written to a temp file and renamed, so a killed client leaves the old file or the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rtrain_tui.core.metrics.metrics import MetricsParser


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "rtrain-tui" / "metrics"


def cache_path(root: Path, host: str, workdir: str, run_id: str) -> Path:
    """One file per (host, workdir, run): the run id for people, a hash for uniqueness
    (a host alias may hold any character; the run id is validated already)."""
    digest = hashlib.sha256("\0".join((host, workdir, run_id)).encode()).hexdigest()[:16]
    return root / f"{run_id}-{digest}.json"


@dataclass
class CachedMetrics:
    offset: int  # bytes of train.log the parser has seen
    parser: MetricsParser
    jsonl_offset: int = 0  # bytes of metrics.jsonl taken: always through a newline


def load(path: Path) -> CachedMetrics | None:
    """The cached metrics, or None when there are none worth using (and a bad file goes)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        data = json.loads(raw)
        offset = int(data["offset"])
        jsonl_offset = int(data.get("jsonl_offset", 0))
        if offset < 0 or jsonl_offset < 0:
            raise ValueError("negative offset")
        return CachedMetrics(offset, MetricsParser.from_state(data["state"]), jsonl_offset)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError):
        path.unlink(missing_ok=True)  # a cache: parse the log again instead
        return None


def save(path: Path, cached: CachedMetrics) -> None:
    """Write atomically; a cache that cannot be written is not worth failing for."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"offset": cached.offset, "jsonl_offset": cached.jsonl_offset,
                           "state": cached.parser.to_state()}, f,
                          separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
