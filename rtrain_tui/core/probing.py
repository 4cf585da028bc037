"""Reading the hosts: a run's probe, many runs' in one round trip, a host's GPUs, its
readiness (preflight), its run directories (finding the runs started elsewhere) and a
run's checkpoints. Every operation reads the hosts through these.

`Prober` is the shared context (context.py) with these reads; the operations take it.
Its methods are the seams a test may slow down (`probe_many`, `checkpoints`): the
operations call them through the object they were given, never around it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from rtrain_tui.core import backends
from rtrain_tui.core.backends import BackendOptions
from rtrain_tui.core.context import EngineContext, epoch_iso
from rtrain_tui.core.errors import NoSuchRunError, RemoteError, UnreachableError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.local_locks import start_in_progress
from rtrain_tui.core.metrics import gpus as gpu_choice
from rtrain_tui.core.runs import checkpoints as checkpoint_rule
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.runs.probes import PreflightReport, RunProbe
from rtrain_tui.core.safety import validate


class HostProbe(NamedTuple):
    """What one probe of a host told: its runs' probes, a GPU sample, the runs found there."""

    runs: list[RunProbe]
    gpus: gpu_choice.HostGpus | None
    found: list[RunRecord]  # runs started elsewhere, now in the index (`find=True` only)
    # Known runs that ended and went on since (`find=True` with `ended`): (workdir, run id,
    # attempts so far or None).
    went_on: tuple[tuple[str, str, int | None], ...] = ()


def _usable_run_id(run_id: str) -> bool:
    try:
        validate.check_run_id(run_id)
    except validate.ValidationError:
        return False
    return True


class Prober(EngineContext):
    """The shared context with the reads of the hosts (see the module docstring)."""

    async def preflight(
        self, host: str, gpus: int = 1, python: str = validate.DEFAULT_PYTHON,
        workdir: str = validate.DEFAULT_WORKDIR, *, ship_bytes: int = 0,
        backend: str | None = None, options: BackendOptions | None = None,
    ) -> PreflightReport:
        """Is the host ready? `ship_bytes`: what a start will upload, checked against free space.

        `backend` (default: the host's config) and its `options` (default: the host's
        defaults for it) say what is asked of the host.
        """
        validate.check_workdir(host, workdir)
        validate.check_python(python)
        validate.check_gpus(gpus)
        kind = backends.get(backend or self.backend_of_host(host))
        options = kind.options(self.hosts.for_host(host), options)
        script = kind.preflight_script(python, workdir)
        conn = self.host(host)
        conn.retry_now()  # a preflight is always a fresh attempt, never a backed-off one
        try:
            out = await conn.run(script, timeout=30)
        except UnreachableError as exc:
            return PreflightReport(host=host, reachable=False, error=str(exc), backend=kind.name)
        return kind.parse_preflight(host, out, python=python, gpus=gpus, ship_bytes=ship_bytes,
                                    options=options, local=conn.direct is not None)

    async def probe(self, host: str, workdir: str, run_id: str) -> RunProbe:
        validate.check_run_id(run_id)
        validate.check_workdir(host, workdir)
        return (await self.probe_many(host, [(workdir, run_id)]))[0]

    async def require_run(self, host: str, workdir: str, run_id: str) -> RunProbe:
        """The run's probe; `NoSuchRunError` when the host has no such run directory.

        Asked before acting on a run the user named, so a typo in the id reads as one,
        not as `unknown`, `was not running` or a missing file.
        """
        found = await self.probe(host, workdir, run_id)
        if not found.exists:
            raise NoSuchRunError(
                f"no run {run_id} on {host} (nothing at {workdir.rstrip('/')}/{run_id}); "
                "`rtrain-tui runs` lists the known runs.")
        return found

    async def probe_many(self, host: str, runs: Sequence[tuple[str, str]],
                         need_end: Collection[int] = ()) -> list[RunProbe]:
        """One script for every run on the host: one round trip, however many runs.

        Runs at the positions in `need_end` also report when they ended, if they have.
        """
        return (await self.probe_host(host, runs, need_end))[0]

    async def probe_host(
        self, host: str, runs: Sequence[tuple[str, str]], need_end: Collection[int] = (),
        gpus: bool = False, kinds: Sequence[str] | None = None, find: bool = False,
        known: Sequence[tuple[str, str]] | None = None,
        ended: Mapping[tuple[str, str], tuple[int, int]] | None = None, add_found: bool = True,
    ) -> HostProbe:
        """The runs' probes and, with `gpus`, a GPU sample: one script per backend.

        `kinds` (each run's backend; default: from the index, else the host's config)
        picks the scripts, sent in the backends' order: the GPU sample shares a round
        trip with the runs of the backend that chooses GPUs (a box's), each other backend
        with runs there takes one more. After nvidia-smi timed out on a host, its GPUs are
        not sampled for a minute: a wedged driver must not slow every refresh by the timeout.

        With `find`, the first script also lists the host's workdirs (the default one and
        those of `runs`) for run directories that `runs` lack, the newest
        `remote_sh.FIND_LIMIT` names of each: no extra round trip when nothing new is
        there; when something is, one more probes it and it joins the index as `found`
        (see `add_found`). A failure of that part leaves the probes above standing.
        `known` (default: `runs`) are the runs the listing is told the host has; `ended`
        gives the recorded end (epoch, the host's clock) of those that ended, and the
        listing tells which of them went on since (`went_on`: its end mark was written
        again, or moved away by a resume or the host's retry; only the newest ends of a
        workdir are told, see `told`). Without `add_found` the
        runs found are left out of the index (`runs --refresh` looks only at its own).
        """
        if kinds is None:
            kinds = await self.run_backends(host, runs)
        gpus = gpus and time.monotonic() >= self.gpu_quiet_until.get(host, 0.0)
        results: list[RunProbe | None] = [None] * len(runs)
        sample = None
        told, untold = (self.told(host, runs if known is None else known, ended or {},
                                   remote_sh.FIND_LIMIT) if find else ([], set()))
        workdirs, listing = (self.find_script(host, told, remote_sh.FIND_LIMIT, ended)
                             if find else ([], ""))
        listed = ""
        chooser = backends.gpu_chooser()
        wanted = set(need_end)
        for kind in backends.all_backends():
            mine = [i for i, k in enumerate(kinds) if (k or backends.DEFAULT) == kind.name]
            # The GPU sample, and a listing with no runs to ride with, go with the chooser's.
            if not mine and not (kind is chooser and (gpus or not runs)):
                continue
            ends = [j for j, i in enumerate(mine) if i in wanted]
            part = [runs[i] for i in mine]
            with_gpus = gpus and kind is chooser
            script = chooser.probe_with_gpus(part, ends) if with_gpus else kind.probe_script(part, ends)
            out = await self.host(host).run(listing + script)
            listed, listing = listed or out, ""  # the listing rides with the first script only
            for i, probe in zip(mine, kind.parse_probe(out, len(mine), host)):
                results[i] = probe
            if with_gpus:
                sample = gpu_choice.parse_gpu_sample(out)
                if sample.timed_out:
                    self.gpu_quiet_until[host] = time.monotonic() + 60.0
        added: list[RunRecord] = []
        went: tuple[tuple[str, str, int | None], ...] = ()
        if find:
            went = tuple((workdirs[w.workdir], w.run_id, w.attempts)
                         for w in probes.parse_went_on(listed, len(workdirs)))
            if untold:
                # An ended run it was not told of, yet among the newest names: its run dir
                # changed after newer ends, so it may have gone on; probed again to know.
                seen = probes.parse_found_runs(listed, len(workdirs))[1]
                went += tuple((workdirs[f.workdir], f.run_id, None) for f in seen
                              if (self.place(host, workdirs[f.workdir]), f.run_id) in untold)
            try:
                added = await self.add_found(host, workdirs, listed, add=add_found)
            except RemoteError:
                pass  # the runs' probes stand; the next probe looks again
        return HostProbe([p or RunProbe(exists=False) for p in results], sample, added, went)

    def told(self, host: str, known: Sequence[tuple[str, str]],
             ended: Mapping[tuple[str, str], int | tuple[int, int]], limit: int
             ) -> tuple[list[tuple[str, str]], set[tuple[str, str]]]:
        """The known runs a listing of the newest `limit` names of each workdir is told of,
        and the places (resolved workdir, run id) of those it is not.

        A run dir's time is about its run's end (its end mark is written there), so of
        the ended runs of a workdir only the `limit` with the newest recorded ends can be
        among the names looked at; a year of runs is not sent, and compared, each refresh.
        The runs that did not end are always told. One not told that is listed anyway
        (a resume or retry moved its dir's time) is probed again, as one that went on."""
        by_place: dict[str, list[tuple[int, tuple[str, str]]]] = {}
        for run in known:
            if run in ended:
                end = ended[run]
                by_place.setdefault(self.place(host, run[0]), []).append(
                    (end[0] if isinstance(end, tuple) else end, run))
        left: set[tuple[str, str]] = set()
        for ends in by_place.values():
            if len(ends) > limit:
                ends.sort(reverse=True)
                left.update(run for _, run in ends[limit:])
        if not left:
            return list(known), set()
        return ([r for r in known if r not in left],
                {(self.place(host, w), r) for w, r in left})

    def find_script(self, host: str, runs: Sequence[tuple[str, str]], limit: int | None,
                    ended: Mapping[tuple[str, str], tuple[int, int]] | None = None
                    ) -> tuple[list[str], str]:
        """The workdirs to list on `host` (the default one and those of `runs`) and the
        `find_runs` script that lists them, told the names `runs` has in each (and the
        end `ended` records for them). A workdir is matched by where it resolved last
        time, so `~/x` and `/home/me/x` share them."""
        workdirs = list(dict.fromkeys([validate.DEFAULT_WORKDIR, *(w for w, _ in runs)]))
        names: dict[str, set[str]] = {}
        ends: dict[str, dict[str, int | tuple[int, int]]] = {}
        for workdir, run_id in runs:
            names.setdefault(self.place(host, workdir), set()).add(run_id)
            if ended and (workdir, run_id) in ended:
                ends.setdefault(self.place(host, workdir), {})[run_id] = ended[(workdir, run_id)]
        known = [names.get(self.place(host, w), set()) for w in workdirs]
        return workdirs, remote_sh.find_runs(workdirs, known, limit,
                                             [ends.get(self.place(host, w), {}) for w in workdirs])

    async def add_found(self, host: str, workdirs: Sequence[str], out: str,
                        add: bool = True) -> list[RunRecord]:
        """Add to the index the runs a `find_runs` listing shows that it lacks; returns them.

        Nothing listed: nothing read, no round trip. Else the index is read again (a run
        started here since the listing is known, not found), the unknown runs probed in
        one round trip and each recorded with its state and start time, marked
        `origin = "found"`. Known runs are matched by their resolved directory, so `~/x`
        and `/home/me/x` are one place. Without `add`, only the workdirs' places are kept.
        """
        resolved, found = probes.parse_found_runs(out, len(workdirs))
        for i, path in resolved.items():
            self.workdirs[(host, workdirs[i])] = path  # what run_dir() would resolve
        if not found or not add:
            return []
        mine = [r for r in await asyncio.to_thread(self.index.load) if r.host == host]
        # A run recorded since the listing, in a workdir it did not cover: where that
        # workdir lies is not known yet, so its id waits for the next listing.
        unsure = {r.run_id for r in mine if (host, r.workdir) not in self.workdirs}
        known = {(self.workdirs.get((host, r.workdir)), r.run_id) for r in mine}
        new: list[tuple[str, probes.FoundRun]] = []
        for f in found:
            place = (resolved.get(f.workdir), f.run_id)
            if (place[0] is None or place in known or f.run_id in unsure
                    or not _usable_run_id(f.run_id)):
                continue
            known.add(place)  # the same directory under two spellings counts once
            new.append((workdirs[f.workdir], f))
        if not new:
            return []
        probed = await self.probe_many(host, [(wd, f.run_id) for wd, f in new], range(len(new)))
        now = index_now()
        # Probed (above) as the host is configured now, as any run the index lacks; from
        # here on that backend is the run's own, whatever config.toml says later.
        backend = self.backend_of_host(host)
        candidates = [
            RunRecord(host, f.run_id, wd, state=p.state, started_at=epoch_iso(f.started),
                      updated_at=now, origin="found", backend=backend,
                      ended_at=epoch_iso(p.ended_at) if probes.is_final(p.state) else "")
            for (wd, f), p in zip(new, probed) if p.exists
        ]
        # Oldest first, as runs started here join the index (the listing is newest first).
        candidates.sort(key=lambda r: r.started_at)
        return await asyncio.to_thread(self.index.add_new, candidates)

    def remember_gpus(self, host: str, sample: gpu_choice.HostGpus,
                      records: Sequence[RunRecord], found: Sequence[RunProbe]) -> gpu_choice.HostGpus:
        """Name our runs' GPU processes and add the sample to the host's history."""
        tokens, groups = gpu_choice.run_maps(
            (r.run_id, r.token, p.pid if p.alive else None) for r, p in zip(records, found))
        sample = sample.with_runs(tokens, groups)
        self.gpu_history.setdefault(host, gpu_choice.GpuHistory()).add(sample)
        return sample

    async def poll_gpus(self, host: str) -> gpu_choice.HostGpus | None:
        """The refresh probe's GPU report alone, for a host with no runs (the host panel)."""
        probe = await self.probe_host(host, [], gpus=True)
        return None if probe.gpus is None else self.remember_gpus(host, probe.gpus, [], probe.runs)

    async def sample_gpus(self, host: str, reserve: bool = False,
                          workdir: str | None = None) -> gpu_choice.HostGpus:
        """Sample the host's GPUs now, naming the processes of the runs the index has there.

        One round trip, and slower than a refresh's GPU report (it waits for nvidia-smi).
        With `reserve`, the GPUs given to our runs that are alive, or whose start is in
        progress, are marked taken: a trainer loading its model is not in nvidia-smi yet;
        so are those the host records as given to our live runs under `workdir` (the
        `gpus` file in each run dir: queued runs get theirs on the host, from any client).
        """
        try:
            # The live file's runs: an ended (archived) run holds no GPU and no process,
            # and a start need not read a year of archives.
            records = [r for r in await asyncio.to_thread(self.index.load_live) if r.host == host]
        except RemoteError:
            records = []  # a broken index only costs the run names
        # Sampled now, not read from the background sample: a start must not choose by
        # a sample from before another run took a GPU.
        runs = [(r.workdir, r.run_id) for r in records]
        chooser = backends.gpu_chooser()
        out = await self.host(host).run(chooser.sample_now_script(runs, workdir))
        found = chooser.parse_probe(out, len(runs), host)
        sample = self.remember_gpus(host, gpu_choice.parse_gpu_sample(out), records, found)
        if not reserve:
            return sample
        taken = tuple(
            (int(i), r.run_id) for r, p in zip(records, found) if r.gpu_ids
            and (p.alive or (r.state == probes.STARTING and start_in_progress(self.index, r.token)))
            for i in r.gpu_ids.split(",") if i.isdigit())
        return replace(sample, reserved=taken + gpu_choice.parse_held(out))

    async def checkpoints(self, host: str, workdir: str, run_id: str,
                          world_size: int | None = None) -> list[checkpoint_rule.Checkpoint]:
        """The run's `checkpoint-N` directories, newest first, each judged complete or not
        (and why) by the one rule in runs/checkpoints.py: one round trip.

        `world_size`: how many processes saved them, when the caller knows (else inferred).
        Raises NoSuchRunError when the host has no such run directory.
        """
        marker = f"ck_{secrets.token_hex(8)}_end"
        script = remote_sh.checkpoints(workdir, run_id, marker)  # validates before connecting
        out = await self.host(host).run(script)
        if out.startswith("nodir\n") or out == "nodir":
            raise NoSuchRunError(
                f"no run {run_id} on {host} (nothing at {workdir.rstrip('/')}/{run_id}); "
                "`rtrain-tui runs` lists the known runs.")
        return checkpoint_rule.judge(checkpoint_rule.parse_listing(out, marker), world_size)
