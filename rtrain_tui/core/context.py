"""What every operation of the engine shares: the connections, the index, the hosts'
settings (config.toml), each known run's backend, where each workdir lies on its host,
what the last refreshes heard (reasons, notices, answers, GPU history) and the
notifications under way.

The operations (start.py, resume.py, refresh.py, stop.py, fetch.py) each take this
context, as `probing.Prober`, which adds the probes they read the hosts with; engine.py's
`Engine` is that context with one method per operation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from rtrain_tui.core import backends
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.metrics import gpus as gpu_choice
from rtrain_tui.core.notify import notifier
from rtrain_tui.core.runs import hostconfig, probes
from rtrain_tui.core.runs.index import RunIndex, RunKey, RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.runs.probes import RunProbe
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.mask import mask_text
from rtrain_tui.core.transport.connection import ConnectionPool, HostConnection


class EngineContext:
    """The state the engine's operations share (see the module docstring)."""

    def __init__(self, pool: ConnectionPool, index: RunIndex,
                 hosts: hostconfig.HostConfig | None = None) -> None:
        self.pool = pool
        self.index = index
        self._hosts = hosts
        self.workdirs: dict[tuple[str, str], str] = {}
        # Per host: the GPU samples of the last minutes (the host panel's sparklines),
        # and until when sampling is skipped after nvidia-smi timed out there.
        self.gpu_history: dict[str, gpu_choice.GpuHistory] = {}
        self.gpu_quiet_until: dict[str, float] = {}
        # Why each run waits or ended, as the last refresh heard it (a scheduler's reason): the
        # index keeps only the status word, the TUI shows this beside it.
        self.reasons: dict[tuple[str, str, str], str] = {}
        # What refreshes did of their own accord (a run lost to a reboot, resumed), one
        # line each, for the face to show and clear.
        self.notices: list[str] = []
        # Each known run's backend as its index record says ("" = backends.DEFAULT):
        # filled by refresh and start, so a probe need not re-read the index.
        self.kinds: dict[tuple[str, str, str], str] = {}
        # Per host: did its last refresh probe get an answer? (A host whose runs are all
        # settled has no run state to tell it by.)
        self.answered: dict[str, bool] = {}
        self.sending: set[asyncio.Task[None]] = set()  # notifications under way (tell)

    @property
    def hosts(self) -> hostconfig.HostConfig:
        """Per-host settings (config.toml), read once, when first needed."""
        if self._hosts is None:
            self._hosts = hostconfig.load()
        return self._hosts

    def reload_hosts(self) -> None:
        """Read config.toml again on next use (after the app wrote it)."""
        self._hosts = None

    def backend_of_host(self, host: str) -> str:
        return self.hosts.for_host(host).backend

    def backend_of(self, record: RunRecord) -> str:
        """The backend of `record`'s run (`HostConfig.backend_of`: its own, else what
        an older version that recorded none meant)."""
        return self.hosts.backend_of(record)

    async def run_backends(self, host: str, runs: Sequence[tuple[str, str]]) -> list[str]:
        """Each run's backend, as its index record says: fixed when it started, never
        following later changes to the host's config (marking a box as a login node
        must not turn its running runs into `lost` jobs); an empty one as
        `backend_of` reads it. Only a run the index does not know (`status` of a run
        started elsewhere) is taken to be what its host is now.
        """
        # The live file first, then the archives it takes (`find`): `status` of a run
        # need not read a year of them.
        keys = [(host, w, r) for w, r in runs]
        for load in (self.index.load_live, lambda: self.index.find(keys)):
            if all((host, w, r) in self.kinds for w, r in runs):
                break
            try:
                self.kinds.update({rec.key: self.backend_of(rec)
                                    for rec in await asyncio.to_thread(load)})
            except RemoteError:
                break
        kinds = [self.kinds.get((host, w, r)) for w, r in runs]
        default = self.backend_of_host(host) if None in kinds else backends.DEFAULT
        return [default if kind is None else kind for kind in kinds]

    def host(self, alias: str) -> HostConnection:
        try:
            return self.pool.get(validate.check_host(alias))
        except validate.ValidationError:
            # Not a hostname: fine if the ssh config names it (`Host "rented box"`). The
            # config is read only on this rare path, not on every call.
            from rtrain_tui.core.transport.sshconfig import list_hosts

            known = list_hosts(self.pool.ssh_config) if self.pool.ssh_config else []
            return self.pool.get(validate.check_host(alias, known))

    async def close(self) -> None:
        await self.notified()
        await self.pool.close()

    def tell(self, seen: Sequence[notifier.Seen]) -> None:
        """Send what `seen` calls for in the background: a refresh (the app's next poll)
        never waits on a slow or refusing service. What failed lands in `notices`."""
        if not any(notifier.wanted(s, self.hosts) for s in seen):
            return
        task = asyncio.create_task(self._tell_now(seen))
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)

    async def _tell_now(self, seen: Sequence[notifier.Seen]) -> None:
        try:
            self.notices += await notifier.notify(seen, self.hosts, self.run_on, datetime.now(UTC))
        except Exception as exc:  # noqa: BLE001 - a notification never breaks a refresh
            self.notices.append(mask_text(f"notifications not sent: {' '.join(str(exc).split())}"))

    async def notified(self) -> None:
        """Wait for the notifications under way: a command before it says what failed, or exits."""
        while self.sending:
            await asyncio.gather(*self.sending, return_exceptions=True)

    async def run_on(self, host: str, script: str) -> str:
        """`script` run on `host` (what the notifier sends its claims by)."""
        return await self.host(host).run(script)

    async def observed(self, host: str, workdir: str, run_id: str, state: str,
                       probe: RunProbe | None = None) -> None:
        """Record `state`, seen outside a refresh (`status`, the end of `tail`), and tell
        it as a refresh would (core/notify): told before it is recorded, or the change
        would be gone from the index. Failures to send go to `notices`."""
        record = await asyncio.to_thread(self.index.get, host, run_id)
        if record is not None and record.workdir == workdir and record.state != probes.STARTING:
            seen = notifier.Seen(record, state, probe.stalled_for if probe else None,
                                 probe.reason if probe else self.reasons.get(record.key, ""),
                                 epoch_iso(probe.ended_at) if probe else "")
            self.notices += await notifier.notify([seen], self.hosts, self.run_on, datetime.now(UTC))
        await asyncio.to_thread(self.remember_state, host, workdir, run_id, state, probe)

    def remember_state(self, host: str, workdir: str, run_id: str, state: str,
                       probe: RunProbe | None = None) -> None:
        """Record `state` (and, from `probe`, when the run's attempt began running)."""
        # A run the index does not know changes nothing, and set_states then writes nothing.
        key = (host, workdir, run_id)
        self.index.set_states({key: (state, False, index_now())},
                              running=running_since(key, probe) if probe is not None else None)

    async def run_dir(self, host: str, workdir: str, run_id: str) -> str:
        """The run dir as an absolute path on the host (SFTP does not expand `~`)."""
        validate.check_run_id(run_id)
        return f"{await self.workdir_path(host, workdir)}/{run_id}"

    async def workdir_path(self, host: str, workdir: str) -> str:
        """The workdir as an absolute path on the host, asked once per engine (an
        absolute one needs no asking: resolved_here)."""
        key = (host, validate.check_workdir(host, workdir))
        if key not in self.workdirs and (here := resolved_here(workdir)) is not None:
            self.workdirs[key] = here
        if key not in self.workdirs:
            out = (await self.host(host).run(remote_sh.resolve_workdir(workdir))).strip()
            if not out.startswith("/"):
                raise RemoteError(f"{host}: cannot resolve workdir {workdir!r}: {out[:200]}")
            self.workdirs[key] = out.rstrip("/") or "/"
        return self.workdirs[key]

    async def run_python(self, host: str, workdir: str, run_id: str) -> str:
        """The run's own interpreter: transfers run a small program with it on the host."""
        try:
            # Its own record only (the live file, then the archives newest first, until
            # found): a year of archives is not read for one run's interpreter.
            records = await asyncio.to_thread(self.index.find, [(host, workdir, run_id)])
        except RemoteError:
            return validate.DEFAULT_PYTHON
        return next((r.python for r in records if r.key == (host, workdir, run_id) and r.python),
                    validate.DEFAULT_PYTHON)

    def place(self, host: str, workdir: str) -> str:
        """Where `workdir` resolved on `host` last time (itself until then), so that
        `~/x` and `/home/me/x` are one place."""
        return self.workdirs.get((host, workdir), workdir)


def resolved_here(workdir: str) -> str | None:
    """What the host's shell resolves a valid `workdir` to (remote_sh.resolve_workdir),
    when that needs no host: an absolute one is itself, its trailing `/` dropped. None for
    one with `~` or a relative one. A cold start's upload waited for that round trip
    (a new shell session: 50-100 ms) before its first byte."""
    return (workdir.rstrip("/") or "/") if workdir.startswith("/") else None


def running_since(key: RunKey, probe: RunProbe) -> dict[RunKey, tuple[int, str, int | None]]:
    """{key: (attempt, when it began running, seconds the host's retry loop waited before
    it)} when the probe read that; else {}."""
    if probe.running_since is None or probe.running_attempt is None:
        return {}
    return {key: (probe.running_attempt, epoch_iso(probe.running_since), probe.retry_waited_s)}


def epoch_iso(epoch: int | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else ""
