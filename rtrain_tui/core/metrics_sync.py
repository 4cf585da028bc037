"""Bring a run's metrics up to date: read only what its log gained, over SFTP, and cache.

The cache (metrics_cache.py) remembers how many bytes of `train.log` were parsed; this
reads from there to the size a stat just saw, in bounded chunks, so a run with a
1,000,000-line log costs one full read ever and a small read per refresh after that.
A log shorter than the cached offset was replaced: it is parsed from the start.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rtrain_tui.core import metrics_cache, validate
from rtrain_tui.core.bounded import bounded
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.metrics import MetricsParser
from rtrain_tui.core.metrics_cache import CachedMetrics

READ_SIZE = 1 << 20
OP_TIMEOUT = 30.0  # a bound on each SFTP call, whatever the connection does


async def sync_metrics(engine: Any, host: str, workdir: str, run_id: str,
                       cache_dir: Path | None = None) -> MetricsParser:
    """The run's metrics, parsed from its log up to now.

    Raises RemoteError (one line) when the host cannot be read; a run whose log does not
    exist yet has empty metrics, and `no run RUN on HOST` when the run itself does not.
    """
    import asyncssh  # first use only: see connection.py

    validate.check_run_id(run_id)
    validate.check_workdir(host, workdir)
    path = metrics_cache.cache_path(cache_dir or metrics_cache.default_cache_dir(),
                                    host, workdir, run_id)
    cached = await asyncio.to_thread(metrics_cache.load, path) or CachedMetrics(0, MetricsParser())
    start = cached.offset
    run_dir = await engine.run_dir(host, workdir, run_id)
    try:
        sftp = await engine.host(host).sftp()
        try:
            f = await bounded(sftp.open(f"{run_dir}/train.log", "rb"), OP_TIMEOUT)
        except asyncssh.SFTPNoSuchFile:
            if not (await engine.probe(host, workdir, run_id)).exists:
                raise RemoteError(f"no run {run_id} on {host}") from None
            return cached.parser
        try:
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
        finally:
            await f.close()
    except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RemoteError(f"{host}: cannot read the log of {run_id}: {text}") from None
    if cached.offset != start:
        await asyncio.to_thread(metrics_cache.save, path, cached)
    return cached.parser
