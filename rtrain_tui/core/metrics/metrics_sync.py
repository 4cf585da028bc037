"""Bring a run's metrics up to date: read only what its files gained, over SFTP, and cache.

Two files feed the metrics: `train.log` always, and `metrics.jsonl` when the trainer
writes one (how their points combine is MetricsParser's rule, metrics.py). The cache
(metrics_cache.py) remembers how many bytes of each were parsed; this reads from there to
the size a stat just saw, in bounded chunks, so a run with a 1,000,000-line log costs one
full read ever and a small read per refresh after that.

A file shorter than its cached offset was replaced and is parsed from the start: a new
log means a new run under the old name (everything starts over, the jsonl too); a new
jsonl starts only the jsonl's side over. The jsonl's offset stays at its last newline, so
a line the trainer is still writing is read again, whole, once it ends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.logstream import LogSource
from rtrain_tui.core.metrics import metrics_cache
from rtrain_tui.core.metrics.metrics import MetricsParser
from rtrain_tui.core.metrics.metrics_cache import CachedMetrics
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transport.bounded import bounded

READ_SIZE = 1 << 20
OP_TIMEOUT = 30.0  # a bound on each SFTP call, whatever the connection does


async def sync_metrics(engine: LogSource, host: str, workdir: str, run_id: str,
                       cache_dir: Path | None = None) -> MetricsParser:
    """The run's metrics, parsed from its log (and metrics.jsonl, if any) up to now.

    Raises RemoteError (one line) when the host cannot be read; a run whose log does not
    exist yet has empty metrics, and `no run RUN on HOST` when the run itself does not.
    """
    import asyncssh  # first use only: see connection.py

    validate.check_run_id(run_id)
    validate.check_workdir(host, workdir)
    path = metrics_cache.cache_path(cache_dir or metrics_cache.default_cache_dir(),
                                    host, workdir, run_id)
    cached = await asyncio.to_thread(metrics_cache.load, path) or CachedMetrics(0, MetricsParser())
    start = (cached.offset, cached.jsonl_offset, cached.parser.jsonl.records)
    run_dir = await engine.run_dir(host, workdir, run_id)
    what = "the log"
    try:
        sftp = await engine.host(host).sftp()
        try:
            f = await bounded(sftp.open_regular(f"{run_dir}/train.log"), OP_TIMEOUT)
        except asyncssh.SFTPNoSuchFile:
            if not (await engine.probe(host, workdir, run_id)).exists:
                raise RemoteError(f"no run {run_id} on {host}") from None
            f = None
        if f is not None:
            try:
                cached = await _read_log(f, cached)
            finally:
                await f.close()
        what = "metrics.jsonl"
        try:
            f = await bounded(sftp.open_regular(f"{run_dir}/metrics.jsonl"), OP_TIMEOUT)
        except asyncssh.SFTPNoSuchFile:
            f = None
            if cached.jsonl_offset or cached.parser.jsonl.records:
                _restart_jsonl(cached)  # it was there and is gone: its points go too
        if f is not None:
            try:
                await _read_jsonl(f, cached)
            finally:
                await f.close()
    except (TimeoutError, asyncssh.Error, OSError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RemoteError(f"{host}: cannot read {what} of {run_id}: {text}") from None
    if (cached.offset, cached.jsonl_offset, cached.parser.jsonl.records) != start:
        await asyncio.to_thread(metrics_cache.save, path, cached)
    return cached.parser


async def _read_log(f: Any, cached: CachedMetrics) -> CachedMetrics:
    """Feed the log's new bytes; a new CachedMetrics when the log was replaced."""
    size = (await bounded(f.stat(), OP_TIMEOUT)).size or 0
    if size < cached.offset:
        cached = CachedMetrics(0, MetricsParser())  # a new log under the old name
    while cached.offset < size:
        data = await bounded(
            f.read(min(READ_SIZE, size - cached.offset), cached.offset), OP_TIMEOUT)
        if not data:
            break  # truncated under us; the next sync starts over
        cached.parser.feed(data)
        cached.offset += len(data)
        await asyncio.sleep(0)  # a big first read must not freeze the app
    return cached


def _restart_jsonl(cached: CachedMetrics) -> None:
    cached.parser.reset_jsonl()
    cached.jsonl_offset = 0


async def _read_jsonl(f: Any, cached: CachedMetrics) -> None:
    """Feed metrics.jsonl's new complete lines; the offset moves to the last newline."""
    size = (await bounded(f.stat(), OP_TIMEOUT)).size or 0
    if size < cached.jsonl_offset:
        _restart_jsonl(cached)  # replaced by a shorter file
    # Bytes read but not yet used: the start of an unfinished line (at most MAX_LINE,
    # longer ones are skipped), so memory stays bounded by one read plus one line.
    carry = b""
    read_at = cached.jsonl_offset
    while read_at < size:
        data = await bounded(f.read(min(READ_SIZE, size - read_at), read_at), OP_TIMEOUT)
        if not data:
            break
        read_at += len(data)
        carry += data
        used = cached.parser.feed_jsonl(carry)
        cached.jsonl_offset += used
        carry = carry[used:]
        await asyncio.sleep(0)
