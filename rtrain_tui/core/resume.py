"""Resume: a run that ended `failed`, `stopped` or `lost` gets a new attempt in the same
run directory, from its newest complete checkpoint (or one chosen by hand, or from the
start).

What a start launched is kept in the run dir (`launch.json`: the trainer template, its
python, dataset, GPUs asked for and the user's env), so a resume launches the same
command again; only what is per attempt changes:
- the GPUs are chosen again, as `start` chooses them (the host's GPU-choice lock, the
  same sample and rule);
- the checkpoint is told three ways: the default trainer's `config.yaml` gets the
  top-level line `resume_from_checkpoint: '<path>'` (replaced or added, with the indented
  lines an old value goes on over, which would otherwise join the key before it; a
  restart removes it), a `--trainer` template's `{resume:FLAG}` renders as `FLAG '<path>'`, and
  every trainer sees `RTRAIN_RESUME_FROM=<path>`;
- the files that said how the attempt before ended (its exit code, stop marks, pid file,
  identity, launch lock, Slurm job id) move to `attempts/N/`, and `train.token` gets a
  new token: liveness, the probe and the stop ladder read the new attempt exactly as
  they read a first one, and nothing of attempt 1 can be taken for attempt 2;
- the log goes on in `train.log` after `=== attempt 2: resuming from outputs/checkpoint-150 ===`;
  `attempts.jsonl` records each attempt (started, checkpoint; ended, exit, state, reason).

Exactly once: on the host, the claim is one `mkdir attempts/N` (two resumes from two
laptops: one launches, the other is told); on this machine, resumes of one run wait for
each other on a lock file, so the second sees the first's attempt running and refuses.
The index entry becomes `starting` (with the new token, its end time cleared, so a
refresh probes it again) and then what the launch said, as a start's does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rtrain_tui.core import backends, launch
from rtrain_tui.core.backends import GpuChoice, LaunchSpec
from rtrain_tui.core.errors import NoSuchRunError, RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.launch import StartedRun, StartRequest, StepCallback
from rtrain_tui.core.local_locks import HostLock, start_in_progress, starting
from rtrain_tui.core.logs import reasons
from rtrain_tui.core.logs.retry_rule import separator  # one wording for resume and retry
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import attempt_layout, probes
from rtrain_tui.core.runs import checkpoints as checkpoint_rule
from rtrain_tui.core.runs.cost import next_attempt as billing  # the one cost rule's
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.core.transport.connection import HostConnection

_LAUNCH_NAME = attempt_layout.LAUNCH_JSON  # as messages name it (launch.LAUNCH_JSON: its path)
RESUME_ENV = "RTRAIN_RESUME_FROM"
RESUME_WAIT = 120.0  # how long a resume waits for another resume of the same run here
# The states a resume takes: the run ended and did not complete.
RESUMABLE = (probes.STOPPED, probes.LOST, probes.FAILED)


@dataclass(frozen=True)
class ResumedRun:
    """A resume's outcome: the launched attempt (as a start's), its number, the checkpoint
    it resumes from ('' = from the start) and the newer checkpoints skipped (one line each)."""

    started: StartedRun
    attempt: int
    checkpoint: str
    skipped: tuple[str, ...] = ()


def resumable(state: str) -> bool:
    return state in RESUMABLE or state.startswith("failed")


def refusal(state: str, host: str, run_id: str) -> str:
    """Why a run in `state` cannot be resumed, and what to do instead."""
    if state == probes.STARTING:
        return (f"{run_id} is starting on {host}: a start or resume of it is under way; wait "
                f"for it (`rtrain-tui status {host} {run_id}` tells how it is going).")
    if state in (probes.RUNNING, probes.QUEUED):
        return (f"{run_id} is {state} on {host}: only a run that ended failed, stopped or lost "
                f"can be resumed; stop it first (`rtrain-tui stop {host} {run_id}`).")
    if state == probes.COMPLETED:
        return (f"{run_id} completed on {host}: there is nothing to resume; start a new run "
                "to train again.")
    return (f"{run_id} on {host} is {state}: it never launched, so there is nothing to "
            "resume; start it again.")


def parse_attempts(text: str) -> list[dict[str, Any]]:
    """attempts.jsonl's records merged by attempt number, in order (lines that do not
    parse are skipped: it is host text)."""
    merged: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            one = json.loads(line)
        except ValueError:
            continue
        # Bounded (R09): a line claiming attempt 2,000,000 is no attempt, not a list that long.
        if not isinstance(one, dict) or attempt_layout.attempt_number(one.get("attempt")) is None:
            continue
        merged.setdefault(one["attempt"], {}).update(one)
    return [merged[n] for n in sorted(merged)]


def attempts_view(recorded: list[dict[str, Any]], state: str, exit_code: int | None,
                  reason: str, ended: int | None = None) -> list[dict[str, Any]]:
    """Every attempt of a run, oldest first, each `{attempt, started, launched, ended, exit,
    state, reason, checkpoint}` (times ISO 8601 UTC, null when not known; `launched`: when
    a queued attempt got its GPUs); the last one is the
    run as it is now (`state`, `exit_code`, `reason`: what the probe and `status` say;
    `ended`: when an ended run ended, epoch seconds, where attempts.jsonl has no end)."""
    by_number = {a["attempt"]: a for a in recorded}
    last = max(by_number, default=1)
    view = []
    for n in range(1, last + 1):
        one = by_number.get(n, {})
        current = n == last
        view.append({
            "attempt": n, "started": _iso(one.get("started")),
            "launched": _iso(one.get("launched")),
            "ended": _iso(one.get("ended") or (ended if current else None)),
            "exit": exit_code if current else one.get("exit"),
            "state": state if current else one.get("state"),
            "reason": reason if current else (one.get("reason") or ""),
            "checkpoint": one.get("checkpoint") or None,
        })
    return view


def _iso(value: object) -> str | None:
    """A time as attempts.jsonl has it (epoch seconds from the host, or ISO text) in ISO."""
    from datetime import UTC, datetime

    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40:
        return datetime.fromtimestamp(value, UTC).isoformat()
    return safe_line(value)[:40] if isinstance(value, str) and value else None


def check_request(from_path: str | None, restart: bool) -> None:
    """Refuse a `--from` that is no checkpoint-N path of a run, or one given with
    `--restart` (ValidationError): user input, checked before any connection."""
    if restart and from_path is not None:
        raise validate.ValidationError("--restart and --from disagree: give one of them.")
    if from_path is not None:
        validate.check_fetch_path(from_path)
        if checkpoint_rule.step_of(from_path.strip("/")) is None:
            raise validate.ValidationError(
                f"--from {from_path!r} is not a checkpoint-N directory of the run (up to 3 "
                "levels deep, letters, digits, '.', '_', '-'), e.g. outputs/checkpoint-150.")


def _run_lock_path(ctx: Prober, host: str, workdir: str, run_id: str) -> Path:
    digest = hashlib.sha256(f"{host}\0{workdir}\0{run_id}".encode()).hexdigest()[:32]
    return ctx.index.path.parent / "starting" / f"resume-{digest}.lock"


async def _facts(ctx: Prober, host: str, workdir: str, run_id: str) -> dict[str, str]:
    out = await ctx.host(host).run(remote_sh.resume_facts(workdir, run_id))
    if out.strip() == "nodir":
        raise NoSuchRunError(f"no run {run_id} on {host}; `rtrain-tui runs` lists the known runs.")
    return dict(probes.parse_key_values(out))


def _spec(facts: dict[str, str], host: str, run_id: str) -> dict[str, Any]:
    """launch.json, checked as a start checks its request (it is host text)."""
    try:
        spec = json.loads(facts["spec"])
        if not isinstance(spec, dict):
            raise ValueError(spec)
    except (KeyError, ValueError):
        raise RemoteError(
            f"{run_id} on {host} has no usable {_LAUNCH_NAME} (it was started by an older "
            "rtrain-tui or by `praisonai train remote`), so what to launch again is not "
            "known; start it again instead.") from None
    try:
        validate.check_trainer_template(spec["trainer"])
        validate.check_python(spec["python"])
        if spec.get("dataset") is not None:
            validate.check_dataset_name(spec["dataset"])
        validate.check_gpus(int(spec["gpus"]))
        env = validate.parse_env([f"{k}={v}" for k, v in dict(spec.get("env") or {}).items()])
        ids = tuple(int(i) for i in spec.get("gpu_ids") or ())
        if ids:
            validate.parse_gpu_ids(",".join(map(str, ids)))
    except (KeyError, TypeError, ValueError, validate.ValidationError) as exc:
        # Worded as launch.json's: the validators name the flags of `start`, which the
        # user did not give to `resume`.
        raise RemoteError(f"{run_id} on {host}: its {_LAUNCH_NAME} is not usable "
                          f"({safe_line(str(exc))[:120]}); start it again instead.") from None
    try:
        retries = validate.check_retries(int(spec.get("retries") or 0))
        base = float(spec.get("retry_base_s", 30.0))
    except (TypeError, ValueError, validate.ValidationError):
        retries, base = 0, 30.0  # host text: a garbled count retries nothing
    try:
        stall = (max(0, int(spec.get("stall_after_s") or 0)),
                 float(spec.get("stall_check_s") or 60.0),
                 validate.check_on_stall(str(spec.get("on_stall") or "warn"), retries))
    except (TypeError, ValueError, validate.ValidationError):
        stall = (0, 60.0, "warn")  # host text: a garbled setting watches nothing
    return {**spec, "env": env, "gpu_ids": ids, "gpus": int(spec["gpus"]), "retries": retries,
            "retry_base_s": base if 0 <= base <= 3600 else 30.0, "stall": stall}


def _previous_token(token: str, host: str, run_id: str) -> str:
    """The attempt before's token, as train.token has it (host text): the claim is made
    only while it is still there, so one that is not a token of ours is refused here,
    before anything is written."""
    try:
        return remote_sh.check_token(token) if token else ""
    except ValueError:
        raise RemoteError(
            f"{run_id} on {host}: its train.token is not one rtrain-tui wrote "
            f"({safe_line(token)[:40]!r}), so its attempts cannot be told apart; start it "
            "again instead.") from None


def _choose_checkpoint(found: list[checkpoint_rule.Checkpoint], chosen: str | None,
                       host: str, run_id: str) -> tuple[str, tuple[str, ...]]:
    """The checkpoint to resume from and the newer ones skipped (lines)."""
    if chosen is not None:
        path = chosen.strip("/")
        mine = next((c for c in found if c.path == path), None)
        if mine is None:
            listed = ", ".join(c.path for c in found[:5]) or "none"
            raise RemoteError(f"--from {chosen}: {run_id} on {host} has no such checkpoint-N "
                              f"directory (it has: {listed}).")
        if not mine.complete:
            raise RemoteError(f"--from {chosen}: {checkpoint_rule.incomplete_note(found, path)}; "
                              "the trainer would fail on it.")
        return mine.path, ()
    newest = checkpoint_rule.newest_complete(found)
    if newest.checkpoint is None:
        why = f" ({'; '.join(newest.lines)})" if newest.lines else ""
        raise RemoteError(f"{run_id} on {host} has no complete checkpoint to resume from{why}; "
                          f"`rtrain-tui resume {host} {run_id} --restart` runs it again from the start.")
    return newest.checkpoint.path, tuple(newest.lines)


async def resume(ctx: Prober, host: str, workdir: str, run_id: str, *,
                 from_path: str | None = None, restart: bool = False,
                 on_step: StepCallback | None = None, reason: str = "",
                 queue: bool = False) -> ResumedRun:
    """See the module docstring. Raises RemoteError (one line) when it does not resume.

    `reason`: why the attempt before ended, as the caller worded it (attempts.jsonl keeps it).
    `queue`: on a box, the new attempt waits on the host for free GPUs (`start --queue`)
    rather than be refused when they are busy.
    """
    validate.check_run_id(run_id)
    validate.check_workdir(host, workdir)
    check_request(from_path, restart)
    step = on_step or (lambda _msg: None)
    await asyncio.to_thread(ctx.index.check)
    # One file per run: removed when the resume is done, or they would pile up.
    lock = HostLock(_run_lock_path(ctx, host, workdir, run_id), remove=True)
    await lock.acquire(RESUME_WAIT, f"another resume of {run_id} on {host} is under way")
    try:
        return await _resume_locked(ctx, host, workdir, run_id, from_path, restart, step,
                                    reason, queue)
    finally:
        lock.release()


async def _resume_locked(ctx: Prober, host: str, workdir: str, run_id: str,
                         from_path: str | None, restart: bool, step: StepCallback,
                         reason: str, queue: bool = False) -> ResumedRun:
    import asyncssh  # not at the top: `runs` and friends never load it

    key = (host, workdir, run_id)
    # Only this run's record: a year of archived runs is not read for one of them.
    old = next(iter(await asyncio.to_thread(ctx.index.find, [key])), None)
    if old is not None and old.state == probes.STARTING and \
            start_in_progress(ctx.index, old.token):
        raise RemoteError(refusal(probes.STARTING, host, run_id))
    step(f"asking {host} how {run_id} ended")
    gone = NoSuchRunError(f"no run {run_id} on {host} (nothing at {workdir.rstrip('/')}/"
                          f"{run_id}); `rtrain-tui runs` lists the known runs.")
    # The facts (the attempts so far, the token the claim is made against) are read
    # BEFORE the state: the state then belongs to that token's attempt or a newer one. Read
    # after it, another laptop's resume could claim and launch attempt 2 in between, and
    # this one took attempt 2's token for the ended attempt's: its claim of attempt 3
    # succeeded over the live attempt 2 (two trainers, attempt 2's files filed away).
    try:
        facts = await _facts(ctx, host, workdir, run_id)
    except NoSuchRunError:
        raise gone from None
    probe = (await ctx.probe_many(host, [(workdir, run_id)], [0]))[0]
    if not probe.exists:
        raise gone
    said = facts.get("attempts", "")
    attempt = (int(said) if said.isdigit() and len(said) < 6 else 1) + 1
    # An attempt claimed but never launched (its launch failed, or the resume was cut
    # off) reads `unknown`: its directory is ready for the next one.
    if not (resumable(probe.state) or (probe.state == probes.UNKNOWN and attempt > 2)):
        await asyncio.to_thread(ctx.remember_state, host, workdir, run_id, probe.state)
        if probe.state == probes.UNKNOWN:
            # Claimed by another resume since the facts were read, its launch not yet
            # under way: that resume is what this one sees, not a run that never launched.
            now = await _facts(ctx, host, workdir, run_id)
            if now.get("token", "") != facts.get("token", ""):
                raise RemoteError(_taken_first(host, run_id, now.get("attempts", "")))
        raise RemoteError(refusal(probe.state, host, run_id))
    spec = _spec(facts, host, run_id)
    previous = _previous_token(facts.get("token", ""), host, run_id)
    kind_name = (await ctx.run_backends(host, [(workdir, run_id)]))[0]
    kind = backends.get(kind_name)
    options = kind.options(ctx.hosts.for_host(host), _options(kind_name, spec.get("options")))
    try:  # what a start would refuse (--retries on a Slurm job of several nodes), refused
        kind.check_retries(spec["retries"], spec["stall"][2], options)
    except validate.ValidationError as exc:
        raise RemoteError(f"{run_id} on {host}: its {_LAUNCH_NAME} is not usable "
                          f"({str(exc).rstrip('.')}); start it again instead.") from None
    # The processes that saved the checkpoints: one per GPU of each node, under torchrun.
    per_node = getattr(options, "gpus_per_node", None)
    world = (spec["gpus"] if per_node is None else per_node) * (getattr(options, "nodes", 1) or 1)
    checkpoint = ""
    skipped: tuple[str, ...] = ()
    if not restart:
        step(f"looking for {run_id}'s newest complete checkpoint")
        found = await ctx.checkpoints(host, workdir, run_id,
                                      world_size=world or None)
        checkpoint, skipped = _choose_checkpoint(found, from_path, host, run_id)
    req = StartRequest(
        host, Path(spec.get("dataset") or "config.yaml"), gpus=spec["gpus"], run_id=run_id,
        python=spec["python"], workdir=workdir, env=dict(spec["env"]), trainer=spec["trainer"],
        gpu_ids=spec["gpu_ids"], allow_busy=bool(spec.get("allow_busy")) and not queue,
        backend=kind.name, queue=queue)
    ended: dict[str, Any] = {"attempt": attempt - 1, "state": probe.state,
                             "exit": probe.exit_code, "ended": probe.ended_at,
                             "reason": safe_line(reason or ctx.reasons.get(key, ""))[:300]}
    if attempt == 2 and old is not None and old.started_at:
        ended["started"] = old.started_at  # the first attempt's start is the run's
    ended_record = json.dumps(ended)
    waits = launch.queues(req) and isinstance(kind, GpuChoice)  # the host chooses
    async with launch.choosing_gpus(ctx, req, kind) as chosen:
        env, gpu_ids = (await launch.gpu_env(ctx, req, step) if isinstance(kind, GpuChoice)
                        else (dict(req.env), ""))
        if checkpoint:
            env[RESUME_ENV] = checkpoint
        conn = ctx.host(host)
        token = secrets.token_hex(16)
        with starting(ctx.index, token):
            nodes, per_node = kind.placement(req.gpus, options)
            base = old or RunRecord(host, run_id, workdir, python=req.python, gpus=per_node,
                                    nodes=nodes, started_at=index_now(), backend=kind.name)
            record = replace(base, state=probes.STARTING, token=token, gpu_ids=gpu_ids,
                             ended_at="", job_id="", stale=False, updated_at=index_now(),
                             running_at="",
                             attempt=attempt,
                             **(billing(old, probe.ended_at, index_now()) if old else {}))
            ctx.kinds[record.key] = record.backend or kind.name
            await asyncio.to_thread(ctx.index.add, record)
            chosen.release()  # the index says which GPUs this attempt has now
            run_dir = await ctx.run_dir(host, workdir, run_id)
            spec_ = LaunchSpec(run_id, token, req.trainer, req.python, spec.get("dataset"),
                               req.gpus, env, options, attempt=attempt, resume_from=checkpoint,
                               retries=spec["retries"] if kind.retries_on_host else 0,
                               retry_base_s=spec["retry_base_s"],
                               queue=(req.gpus, req.gpu_ids) if waits else None,
                               stall_after_s=spec["stall"][0], stall_check_s=spec["stall"][1],
                               on_stall=spec["stall"][2] if kind.retries_on_host else "warn")
            sent = False
            try:
                sftp = await conn.sftp()
                try:
                    spec_ = await launch.notify_from_host(ctx, sftp, run_dir, spec_, record, kind)
                    await launch.together(*launch.ship_launch_files(
                        sftp, run_dir, kind, spec_, f"{kind.launch_file}.{token}"))
                except asyncssh.SFTPError as exc:
                    raise await _unwritable(ctx, host, run_id, run_dir, exc) from None
                script = remote_sh.resume(
                    workdir, run_id, token=token, previous_token=previous,
                    attempt=attempt, checkpoint=checkpoint,
                    edit_config=req.trainer in launch.BUILT_IN_TRAINERS,
                    separator=separator(attempt, checkpoint), ended_record=ended_record,
                    launch_file=kind.launch_file)
                step(kind.launch_step)
                sent = True
                if gpu_ids and isinstance(kind, GpuChoice):
                    out = await _claim_then_launch(ctx, conn, kind, req, record, script,
                                                   run_dir, gpu_ids)
                else:  # the claim and the launch in one round trip
                    out = dict(probes.parse_key_values(
                        await conn.run(script + kind.launch_script(run_dir, token))))
            except BaseException:
                if not sent:  # nothing changed on the host: the entry is as it was
                    await _put_back(ctx, old, replace(record, state=probe.state))
                raise  # else the entry stays `starting`; a refresh reads what happened
            error = safe_line(out.get("error", ""))[:200]
            if "claimed" not in out:
                # Not claimed: another resume (from another machine) took this attempt, or
                # the host did nothing. The entry is probed again by the next refresh.
                await _put_back(ctx, old, replace(record, state=probe.state), probed=True)
                if error == "busy":
                    taken = out.get("taken", "")
                    raise RemoteError(_taken_first(host, run_id, taken, attempt))
                if error == "running":  # a process of the attempt before lives
                    raise RemoteError(refusal(probes.RUNNING, host, run_id))
                if error == "starting":  # the attempt before's job is being submitted
                    raise RemoteError(refusal(probes.STARTING, host, run_id))
                raise RemoteError(f"{host}: attempt {attempt} of {run_id} was not started "
                                  f"({error or 'no answer'}).")
            if error:
                # Claimed, never launched (sbatch refused it): the run dir is ready for the
                # next attempt, and the entry says what the host will (`unknown`).
                await _put_back(ctx, None, replace(record, state=probes.UNKNOWN))
                raise RemoteError(f"{host}: attempt {attempt} of {run_id} did not launch "
                                  f"({error}); `rtrain-tui resume {host} {run_id}` tries again.")
            launched = kind.launched(host, run_id, out)
            if waits:  # its wrapper lives, waiting in the host's queue
                launched = replace(launched, state=probes.QUEUED)
            record = replace(record, state=launched.state, updated_at=index_now(),
                             job_id=launched.job_id)
            unrecorded = await launch.record_launched(ctx, record)
    started = StartedRun(host, run_id, run_dir, launched.pid, record,
                         job_id=launched.job_id, submit_message=launched.message,
                         unrecorded=unrecorded)
    return ResumedRun(started, attempt, checkpoint, skipped)


async def _claim_then_launch(ctx: Prober, conn: HostConnection, kind: GpuChoice,
                             req: StartRequest, record: RunRecord, script: str, run_dir: str,
                             gpu_ids: str) -> dict[str, str]:
    """The attempt claimed (`script`, resume.sh: the run dir then holds no GPUs of the
    attempt before), then its GPUs claimed on the host by the launch path's own stage, as
    a start's are, then the launch: what the host said to each. Without that claim another
    laptop's start, choosing while this resume launched, got the same GPU (R06).

    The GPUs refused (given to another run of ours since the sample) or the claim not
    answered: the attempt is claimed and never launched, its entry says what the host
    will (`unknown`), and the refusal is raised as a start's is."""
    out = dict(probes.parse_key_values(await conn.run(script)))
    if "claimed" not in out or "error" in out:
        return out  # not claimed, or claimed and never launched: the caller says which
    try:
        await launch.claim_gpus(conn, kind, req, record.run_id, gpu_ids, again="resume")
    except RemoteError:
        await _put_back(ctx, None, replace(record, state=probes.UNKNOWN))
        raise
    out.update(probes.parse_key_values(await conn.run(kind.launch_script(run_dir, record.token))))
    return out


def _taken_first(host: str, run_id: str, taken: str, attempt: int = 2) -> str:
    """Another resume took an attempt first: which one (the host's count, else ours)."""
    return (f"another resume of {run_id} on {host} took attempt "
            f"{taken if taken.isdigit() and len(taken) < 6 else attempt} first; "
            f"`rtrain-tui status {host} {run_id}` tells how it is going.")


REBOOTED = "lost: the host rebooted"


async def retry_after_reboot(ctx: Prober, host: str, workdir: str,
                             run_id: str) -> ResumedRun | None:
    """Resume a run lost to a reboot when its start asked for retries and it has had
    fewer than 1 + retries attempts (None: none left, or not one of ours): from its
    newest complete checkpoint, else from the start, as the wrapper's retry would.
    Raises RemoteError when the resume fails (another client took the attempt)."""
    facts = await _facts(ctx, host, workdir, run_id)
    try:
        spec = _spec(facts, host, run_id)
    except RemoteError:
        return None
    said = facts.get("attempts", "")
    attempt = int(said) if said.isdigit() and len(said) < 6 else 1
    if attempt >= 1 + spec["retries"]:
        return None
    found = await ctx.checkpoints(host, workdir, run_id)
    restart = checkpoint_rule.newest_complete(found).checkpoint is None
    return await resume(ctx, host, workdir, run_id, restart=restart, reason=REBOOTED)


async def _unwritable(ctx: Prober, host: str, run_id: str, run_dir: str,
                      exc: Exception) -> RemoteError:
    """Why the new attempt's files could not be written, in one line. A full disk is the
    usual why (the attempt before may have died of it), and SFTP says only `Failure`, so
    the free space is asked for."""
    try:
        said = (await ctx.host(host).run(remote_sh.free_kb(run_dir))).strip()
    except RemoteError:
        said = ""
    if said.isdigit() and int(said) < reasons.FULL_KB:
        return RemoteError(f"{host}: no space left on device where {run_id} is ({said} KiB "
                            "free); free some and resume again. Nothing was changed.")
    why = safe_line(getattr(exc, "reason", "") or str(exc))[:200]
    return RemoteError(f"{host}: could not write the new attempt's files in {run_dir} "
                       f"({why}); nothing was changed.")


async def _put_back(ctx: Prober, old: RunRecord | None, record: RunRecord,
                    probed: bool = False) -> None:
    """The entry as it was before this resume, or, when there was none (a run not in this
    index), `record`; with `probed`, its end time cleared so the next refresh asks the
    host again. A busy index leaves the entry `starting`: a refresh then reads the host."""
    entry = old or record
    try:
        await asyncio.to_thread(ctx.index.add, replace(entry, ended_at="") if probed else entry)
    except RemoteError:
        pass


def _options(kind: str, saved: object) -> Any:
    """The backend options launch.json kept (Slurm's), or None: the host's defaults."""
    if kind != "slurm" or not isinstance(saved, dict):
        return None
    from rtrain_tui.core.backends.slurm.options import SlurmOptions

    try:
        saved = {**saved, "sbatch_args": tuple(saved.get("sbatch_args") or ())}
        return SlurmOptions(**saved).validated()
    except TypeError as exc:
        raise RemoteError(f"the Slurm options in {_LAUNCH_NAME} are not usable: {exc}") from None


async def attempts(ctx: Prober, host: str, workdir: str, run_id: str) -> list[dict[str, Any]]:
    """The run's attempts as attempts.jsonl records them (empty for a run never resumed)."""
    out = await ctx.host(host).run(
        remote_sh.run_dir_assign(workdir, run_id) + attempt_layout.shell_read_attempts_jsonl())
    return parse_attempts(out)
