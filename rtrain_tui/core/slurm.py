"""What Slurm changes: how a run is launched, probed and stopped on a cluster's login node.

Everything else (connections, the run directory, transfers, logs, fetch, the index) is
the engine's, shared with the direct backend. On a cluster:

- **launch**: the run directory gets `run.sbatch` instead of `run.sh`, and `submit`
  hands it to `sbatch --parsable` from the run directory (a shared file system: the
  compute node writes `train.log` and `status` there). The trainer never runs on the
  login node. The job id is kept in `slurm_job_id`.
- **probe**: one script per host reads every run's files and asks Slurm once about all
  their jobs: `squeue -t all -O` (ended jobs stay there for MinJobAge), `scontrol -o show
  job` for what squeue left out, `sacct` when accounting is enabled.
- **stop**: `scancel --signal=TERM --full`, the grace period, then `scancel` (Slurm's own
  TERM, KillWait, KILL), verified by the job's state. A queued job is cancelled at once.

Every value that reaches a shell or an `#SBATCH` line is validated here (strict
character sets) or `shlex.quote`d; the workdir follows `remote_sh.run_dir_word`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from rtrain_tui.core import probes, remote_sh
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.sanitize import safe_line

BACKENDS = ("direct", "slurm")
QUEUED = probes.QUEUED

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PARTITION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?:,[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,15}")
# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME_RE = re.compile(r"[0-9]{1,6}(?::[0-9]{1,2}){0,2}|[0-9]{1,4}-[0-9]{1,2}(?::[0-9]{1,2}){0,2}|UNLIMITED|INFINITE")
_SBATCH_ARG_RE = re.compile(r"--([a-z][a-z0-9-]{0,40})(?:=([A-Za-z0-9_.,:=/+@%-]{1,200}))?")
# Options this module sets itself (or that would break the contract: one job per run,
# its log in train.log, submitted without waiting); each has its own flag or none.
_OWN_OPTIONS = {
    "output": None, "error": None, "input": None, "chdir": None, "wrap": None,
    "parsable": None, "array": None, "wait": None, "test-only": None, "job-name": None,
    "open-mode": None, "partition": "--partition", "nodes": "--nodes",
    "gpus-per-node": "--gpus-per-node", "time": "--time", "account": "--account",
    "qos": "--qos",
}
MASTER_PORT = 29500  # torchrun's default rendezvous port on the first node


@dataclass(frozen=True)
class SlurmOptions:
    """What a Slurm start asks the scheduler for; None/empty means the cluster's default."""

    partition: str = ""
    nodes: int = 1
    gpus_per_node: int | None = None  # None: the run's --gpus
    time: str = ""
    account: str = ""
    qos: str = ""
    sbatch_args: tuple[str, ...] = ()

    def validated(self) -> SlurmOptions:
        """Check every field; raises ValidationError with one line that says what to do."""
        for flag, value, pattern in (("--partition", self.partition, _PARTITION_RE),
                                     ("--account", self.account, _NAME_RE),
                                     ("--qos", self.qos, _NAME_RE)):
            if value and not pattern.fullmatch(value):
                raise ValidationError(f"{flag} {value!r} is not a Slurm name: use letters, "
                                      "digits, '.', '_' and '-' only.")
        if self.time and not _TIME_RE.fullmatch(self.time):
            raise ValidationError(f"--time {self.time!r} is not a Slurm time limit: use MINUTES, "
                                  "HH:MM:SS or D-HH:MM:SS (e.g. 30, 4:00:00, 1-12:00:00).")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= 1024:
            raise ValidationError(f"--nodes must be a whole number from 1 to 1024, not {self.nodes!r}.")
        g = self.gpus_per_node
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= 64):
            raise ValidationError(f"--gpus-per-node must be a whole number from 0 to 64, not {g!r}.")
        for arg in self.sbatch_args:
            check_sbatch_arg(arg)
        return self

    def sbatch_lines(self, run_id: str, gpus: int) -> list[str]:
        """The `#SBATCH` lines of run.sbatch (values already validated: no quoting needed)."""
        gpn = gpus if self.gpus_per_node is None else self.gpus_per_node
        lines = [f"--job-name=rtrain-{run_id}", "--output=train.log", "--open-mode=append",
                 f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        if gpn:
            lines.append(f"--gpus-per-node={gpn}")
        for flag, value in (("--partition", self.partition), ("--time", self.time),
                            ("--account", self.account), ("--qos", self.qos)):
            if value:
                lines.append(f"{flag}={value}")
        lines.extend(self.sbatch_args)
        return [f"#SBATCH {line}" for line in lines]


def check_sbatch_arg(arg: str) -> str:
    """One `--sbatch-arg`: `--name` or `--name=value`, long form, plain characters."""
    m = _SBATCH_ARG_RE.fullmatch(arg) if isinstance(arg, str) else None
    if not m:
        raise ValidationError(f"--sbatch-arg {arg!r} is not usable: pass one long option as "
                              "--name=value (letters, digits and .,:=/+@%_- only), e.g. "
                              "--sbatch-arg=--constraint=a100.")
    name = m.group(1)
    if name in _OWN_OPTIONS:
        own = _OWN_OPTIONS[name]
        how = f"use {own} instead" if own else "rtrain-tui sets it itself"
        raise ValidationError(f"--sbatch-arg {arg!r} is not allowed: {how}.")
    return arg


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValidationError(f"--backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}.")
    return backend


# -- run.sbatch ---------------------------------------------------------------------------
def trainer_values(nodes: int) -> dict[str, str]:
    """Template values for the multi-node fields, as shell words evaluated on each node.

    One node: plain numbers and the loopback address, like a box. Several: the values
    Slurm gives each task (`SLURM_NODEID` differs per node), read inside `srun`'s shell.
    """
    if nodes <= 1:
        return {"nodes": "1", "node_rank": "0", "master_addr": "127.0.0.1",
                "master_port": str(MASTER_PORT)}
    return {"nodes": '"$SLURM_NNODES"', "node_rank": '"$SLURM_NODEID"',
            "master_addr": '"$MASTER_ADDR"', "master_port": '"$MASTER_PORT"'}


# The default command for several nodes: one torchrun per node, rendezvous on the first.
MULTI_NODE_TRAINER = ("{python} -m torch.distributed.run --nnodes {nodes} --node_rank {node_rank} "
                      "--nproc_per_node {gpus} --rdzv_backend c10d "
                      "--rdzv_endpoint {master_addr}:{master_port} "
                      "-m praisonai_train llm {dataset} --config {config}")


def batch_script(run_id: str, token: str, trainer_cmd: str, env: Mapping[str, str],
                 options: SlurmOptions, gpus: int) -> str:
    """The `run.sbatch` submitted for one run.

    The batch shell runs the trainer in the background and forwards TERM/INT/HUP to it
    (a trap, not `exec`, so the shell survives to write the trainer's exit code into
    `status`, as the direct wrapper does). Several nodes: `srun` starts one launcher per
    node; the first host of the allocation is the rendezvous point.
    """
    tok = remote_sh.check_token(token)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    if options.nodes > 1:
        launch = (
            'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
            f"MASTER_PORT=${{MASTER_PORT:-{MASTER_PORT}}}\nexport MASTER_ADDR MASTER_PORT\n"
            "srun --nodes=\"$SLURM_NNODES\" --ntasks-per-node=1 --kill-on-bad-exit=1 "
            f"sh -c {shlex.quote(trainer_cmd)} < /dev/null &\n"
        )
    else:
        # Braces keep a template's `a; b` together in the background job (and away from
        # this shell's traps); dash runs a lone command in them without a subshell, so
        # `$child` is the trainer itself and the forwarded TERM reaches it.
        launch = f"{{ {trainer_cmd}\n}} < /dev/null &\n"
    return f"""#!/bin/sh
{chr(10).join(options.sbatch_lines(run_id, gpus))}
# Written by rtrain-tui: the batch script of one training run. Slurm runs it on the
# first node of the job, in the run directory; its output is train.log.
RTRAIN_RUN={tok}; export RTRAIN_RUN
echo "$SLURM_JOB_ID" > slurm_job_id.tmp && mv slurm_job_id.tmp slurm_job_id
{remote_sh.UNBUFFERED}{exports}trap 'kill -TERM $child 2>/dev/null' TERM INT HUP
{launch}child=$!
wait $child; rc=$?
# A trapped signal interrupts `wait` (rc > 128) while the trainer still runs: wait again.
while kill -0 $child 2>/dev/null; do wait $child; rc=$?; done
echo $rc > status.tmp && mv status.tmp status
# Which attempt wrote `status` (Slurm runs this script again for a requeued job): an exit
# code counts only while the job is still on that attempt. Written second, so a probe
# between the two never pairs an old code with the new attempt.
echo "${{SLURM_RESTART_COUNT:-0}}" > status_attempt.tmp && mv status_attempt.tmp status_attempt
exit $rc
"""


def submit(run_dir: str, token: str) -> str:
    """Submit run.sbatch once; print `job=ID` (and `message=...`) or `error=...`.

    Idempotent, like `remote_sh.launch`: `launch.lock` is made with an atomic mkdir and
    only the script that made it runs sbatch, so a re-sent script (after a dropped link)
    submits nothing and reports the one job. A failed submit removes the lock (no job
    exists) so the start can be undone; its message is kept in `submit_error`.

    The job id is the first `;`-field of the first line sbatch prints on stdout, and
    nothing else: clusters print notices on stderr (a `job_submit.lua` calling
    `slurm.log_user`: "sbatch: 12 GPU-hours left"), which are kept in `submit_message`
    for the user and never mixed into the id.
    """
    rd = shlex.quote(run_dir)
    tok = remote_sh.check_token(token)
    return f"""cd {rd} || {{ echo "error=no run directory"; exit 0; }}
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != {tok} ]; then echo "error=not this start's run directory"; exit 0; fi
if ! command -v sbatch >/dev/null 2>&1; then echo "error=sbatch not found on the login node"; exit 0; fi
if mkdir launch.lock 2>/dev/null; then
  rm -f submit_error submit_message
  if out=$(sbatch --parsable run.sbatch 2>submit_message.tmp < /dev/null); then
    [ -s submit_message.tmp ] && tr '\\n' ' ' < submit_message.tmp > submit_message
    id=$(printf '%s\\n' "$out" | head -n 1); id=${{id%%;*}}
    case $id in
      ''|*[!0-9_]*) printf 'sbatch printed no job id: %s\\n' "$out" | tr '\\n' ' ' > submit_error;;
      *) printf '%s\\n' "$id" > slurm_job_id.tmp && mv slurm_job_id.tmp slurm_job_id;;
    esac
  else
    {{ cat submit_message.tmp; printf '%s\\n' "$out"; }} | tr '\\n' ' ' > submit_error; rmdir launch.lock
  fi
  rm -f submit_message.tmp
fi
i=0
while [ ! -s slurm_job_id ] && [ ! -s submit_error ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if [ -s slurm_job_id ]; then echo "job=$(cat slurm_job_id)"
  if [ -s submit_message ]; then echo "message=$(head -c 300 submit_message)"; fi
elif [ -s submit_error ]; then echo "error=$(head -c 300 submit_error)"
else echo "error=sbatch gave no job id within 30 s"; fi
"""


# -- probe ----------------------------------------------------------------------------------
# Slurm job states that still hold the job's processes (or will start them).
_ACTIVE = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
           "RESIZING", "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_PENDING = {"PENDING"}
# Ends that are the job's failure, not the trainer's: kept as the reason beside the word.
FAILURE_STATES = {"TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                  "PREEMPTED", "FAILED"}
_SEP = "|"


def run_states(runs: Sequence[tuple[str, str]]) -> str:
    """One script for all the Slurm runs of a host: their files, then one Slurm query.

    Prints per run `I\\texists=..\\tjob=..\\tcode=..\\tattempt=..\\tstop=..\\tstopped=..\\tlaunched=..`
    (`attempt`: the job's restart count when `status` was written), then per job
    `J\\tID|STATE|REASON|RAW_EXIT|RESTARTS` lines from squeue (raw wait status),
    `C\\t` lines from `scontrol -o show job` for jobs squeue did not list, and `A\\t` lines
    from sacct (`ID|STATE|EXIT:SIG`) when accounting is enabled.
    """
    lines = [r"""read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
ids=
probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/slurm_job_id"; job=$rf
  case $job in ''|*[!0-9_]*) job=;; *) ids="$ids${ids:+,}$job";; esac
  read_file "$rd/status"; code=$rf
  read_file "$rd/status_attempt"; attempt=$rf
  stop=0; [ -s "$rd/stop_requested" ] && stop=1
  stopped=0; [ -e "$rd/stopped" ] && stopped=1
  launched=0; [ -e "$rd/launch.lock" ] && launched=1
  printf '%s\texists=1\tjob=%s\tcode=%s\tattempt=%s\tstop=%s\tstopped=%s\tlaunched=%s\n' \
    "$1" "$job" "$code" "$attempt" "$stop" "$stopped" "$launched"
}"""]
    for i, (workdir, run_id) in enumerate(runs):
        lines.append(f"probe {i} {remote_sh.run_dir_word(workdir, run_id)}")
    lines.append(r"""[ -n "$ids" ] || exit 0
sq=$(squeue -h -t all -j "$ids" -O 'JobID:|,State:|,Reason:|,exit_code:|,RestartCnt:|' 2>/dev/null)
printf '%s\n' "$sq" | sed -n 's/^\([0-9]\)/J	\1/p'
case $sq in *'|PENDING|'*)
  # Our waiting jobs' places in their partition's queue, in Slurm's priority order
  # (every user's pending jobs; bounded): `Q<TAB>ID|PLACE`.
  squeue -h -t PD --sort=-p,i -O 'JobID:|,Partition:|' 2>/dev/null | head -n 20000 |
    awk -F'|' -v ids=",$ids," '{ n[$2]++ } index(ids, "," $1 ",") { print "Q\t" $1 "|" n[$2] }'
esac
oldifs=$IFS; IFS=,
for id in $ids; do
  case "
$sq" in *"
$id|"*) continue;; esac
  out=$(scontrol -o show job "$id" 2>/dev/null) && printf 'C\t%s\n' "$out"
  missing="$missing${missing:+,}$id"
done
IFS=$oldifs
if [ -n "$missing" ]; then
  sacct -n -P -X -j "$missing" -o JobID,State,ExitCode 2>/dev/null | sed 's/^/A	/'
fi
""")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class JobInfo:
    """What Slurm says about one job. `exit_code`/`signal`: the batch script's end;
    `restarts`: how often it was requeued (None where the source does not say: sacct)."""

    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    restarts: int | None = None


def parse_jobs(output: str) -> dict[str, JobInfo]:
    """Jobs from the `J`, `C` and `A` lines; an earlier source wins over a later one."""
    jobs: dict[str, JobInfo] = {}
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "J":
            parts = rest.split(_SEP)
            if len(parts) < 4 or not parts[0].strip().isdigit():
                continue
            raw = _int(parts[3])
            info = JobInfo(parts[1].strip(), _clean_reason(parts[2]),
                           None if raw is None else (raw >> 8) & 0xFF,
                           None if raw is None else raw & 0x7F,
                           _int(parts[4]) if len(parts) > 4 else None)
            jobs.setdefault(parts[0].strip(), info)
        elif kind == "C":
            facts = dict(w.partition("=")[::2] for w in rest.split(" ") if "=" in w)
            job = facts.get("JobId", "")
            if job.isdigit():
                code, sig = _exit_pair(facts.get("ExitCode", ""))
                jobs.setdefault(job, JobInfo(facts.get("JobState", ""),
                                             _clean_reason(facts.get("Reason", "")), code, sig,
                                             _int(facts.get("Restarts", ""))))
        elif kind == "A":
            parts = rest.split(_SEP)
            if len(parts) >= 3 and parts[0].isdigit():
                code, sig = _exit_pair(parts[2])
                # sacct writes `CANCELLED by 0`: the state is the first word.
                jobs.setdefault(parts[0], JobInfo(parts[1].split(" ")[0], "", code, sig))
    return jobs


def _clean_reason(reason: str) -> str:
    reason = safe_line(reason.strip())[:120]  # host text: shown in the terminal and the TUI
    return "" if reason in ("None", "(null)") else reason


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return _int(code), _int(sig)


def parse_run_states(output: str, count: int, host: str = "the host") -> list[probes.RunProbe]:
    """The status word of each run, from its files first and Slurm's view second.

    - `status` written (the batch script recorded the trainer's exit): that code, with
      Slurm's end state as the reason when it is a failure (TIMEOUT, OUT_OF_MEMORY…).
    - our stop verified (`stopped`), or issued and the job ended: `stopped`.
    - pending: `queued` with Slurm's reason; running-ish: `running`.
    - ended without an exit recorded: `failed (exit N)` from Slurm's exit code or signal
      when Slurm calls it a failure (the reason says which); else `lost`.
    - a job Slurm no longer knows and nothing recorded: `lost`.
    """
    jobs = parse_jobs(output)
    places = _queue_places(output)
    found: dict[int, probes.RunProbe] = {}
    for line in output.splitlines():
        index, *fields = line.split("\t")
        i = _int(index) if index[:1].isdigit() else None
        if i is None or not 0 <= i < count:
            continue
        facts = dict(f.partition("=")[::2] for f in fields)
        found[i] = _probe_of(facts, jobs, places)
    probes.check_answered(len(found), count, output, host)
    return [found.get(i, probes.RunProbe(exists=False)) for i in range(count)]


def _queue_places(output: str) -> dict[str, int]:
    """`Q<TAB>ID|PLACE` lines: where each of our waiting jobs stands in its queue."""
    places = {}
    for line in output.splitlines():
        if line.startswith("Q\t"):
            job, _, place = line[2:].partition("|")
            if job.strip() and place.strip().isdigit():
                places[job.strip()] = int(place)
    return places


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _probe_of(facts: Mapping[str, str], jobs: Mapping[str, JobInfo],
              places: Mapping[str, int] | None = None) -> probes.RunProbe:
    job_id = facts.get("job", "")
    base = probes.RunProbe(
        exists=facts.get("exists") == "1",
        exit_code=_int(facts.get("code", "")),
        stop_requested=facts.get("stop") == "1",
        stopped=facts.get("stopped") == "1",
        launched=facts.get("launched") == "1" or bool(job_id),
        job_id=job_id,
    )
    if not base.exists or not job_id:
        return base  # not submitted (yet): `unknown`, or `starting` to the engine
    info = jobs.get(job_id)
    if info is None:
        return base  # gone from Slurm: the recorded code, our stop, or `lost`
    # A requeued job (preempted, `scontrol requeue`, a node failure) runs run.sbatch again:
    # the `status` its earlier attempt wrote (143: the requeue's SIGTERM) is not this run's
    # end. A status with no attempt recorded is the first attempt's.
    attempt = _int(facts.get("attempt", "")) or 0
    if base.exit_code is not None and info.restarts is not None and attempt != info.restarts:
        base = replace(base, exit_code=None)
    state = info.state
    reason = state if state in FAILURE_STATES and state != "FAILED" else ""
    if base.exit_code is not None or base.stopped:
        return replace(base, reason=reason, slurm_state=state)
    if state in _PENDING:
        place = (places or {}).get(job_id)
        why = f"{info.reason}, {_ordinal(place)} in the queue" if place else info.reason
        return replace(base, queued=True, reason=why, slurm_state=state, queue_place=place)
    if state in _ACTIVE:
        return replace(base, alive=True, slurm_state=state)
    if state == "CANCELLED" and not base.stop_requested:
        return replace(base, reason="CANCELLED", slurm_state=state)  # someone else's scancel: lost
    if state in FAILURE_STATES and not base.stop_requested:
        code = info.exit_code or (128 + info.signal if info.signal else 1)
        return replace(base, exit_code=code, reason=reason, slurm_state=state)
    if state == "COMPLETED" and info.exit_code == 0 and not base.stop_requested:
        return replace(base, exit_code=0, slurm_state=state)
    return replace(base, slurm_state=state)


# -- stop -------------------------------------------------------------------------------------
def stop_signal(workdir: str, run_id: str, nonce: str, full_cancel: bool) -> str:
    """Ask Slurm to end the run's job: TERM to every process (`--full`), or `scancel` itself.

    Prints `result=not_running` (no job, or it already ended, and not by our stop),
    `result=signalled` with `queued=1` when the job had not started (cancelled at once),
    or `result=error`. The stop is recorded in `stop_requested` first, so a run whose
    job ends between the two reads `stopped`. Idempotent under a re-send: our own nonce
    on record answers `signalled`.
    """
    tok = remote_sh.check_token(nonce)
    cancel = "scancel" if full_cancel else "scancel --signal=TERM --full"
    return f"""set -- {remote_sh.run_dir_word(workdir, run_id)}; rd=$1
job=; [ -r "$rd/slurm_job_id" ] && read -r job < "$rd/slurm_job_id"
case $job in ''|*[!0-9_]*) echo result=not_running; exit 0;; esac
st=$(squeue -h -t all -j "$job" -o '%T' 2>/dev/null)
[ -n "$st" ] || st=$(scontrol -o show job "$job" 2>/dev/null | sed -n 's/.*JobState=\\([A-Z_]*\\).*/\\1/p')
ours=0; [ "$(cat "$rd/stop_requested" 2>/dev/null)" = {tok} ] && ours=1
case $st in
  PENDING|REQUEUE*|RESV_DEL_HOLD)
    [ -s "$rd/stop_requested" ] || echo {tok} > "$rd/stop_requested"
    scancel "$job" >/dev/null 2>&1; echo result=signalled; echo queued=1;;
  RUNNING|CONFIGURING|COMPLETING|SUSPENDED|STOPPED|SIGNALING)
    [ -s "$rd/stop_requested" ] || echo {tok} > "$rd/stop_requested"
    if out=$({cancel} "$job" 2>&1); then echo result=signalled
    else echo "result=error"; printf 'why=%s\\n' "$out" | head -n 1; fi;;
  *)
    if [ $ours = 1 ]; then echo result=signalled; else echo result=not_running; fi;;
esac
echo "state=$st"; echo "job=$job"
"""


def job_state(workdir: str, run_id: str) -> str:
    """Print `state=STATE` of the run's job ('' when Slurm no longer knows it)."""
    return f"""set -- {remote_sh.run_dir_word(workdir, run_id)}; rd=$1
job=; [ -r "$rd/slurm_job_id" ] && read -r job < "$rd/slurm_job_id"
case $job in ''|*[!0-9_]*) echo state=; exit 0;; esac
st=$(squeue -h -t all -j "$job" -o '%T' 2>/dev/null)
[ -n "$st" ] || st=$(scontrol -o show job "$job" 2>/dev/null | sed -n 's/.*JobState=\\([A-Z_]*\\).*/\\1/p')
echo "state=$st"
"""


def job_gone(state: str) -> bool:
    """True once the job holds no process any more (COMPLETING still may)."""
    return state not in _ACTIVE and state not in _PENDING


# -- preflight --------------------------------------------------------------------------------
def preflight(python: str, workdir: str) -> str:
    """Facts about a login node: python/trainer, disk, and Slurm's partitions and our jobs."""
    from rtrain_tui.core import remote_sh

    return f"""{remote_sh.workdir_assign(workdir)}
{remote_sh.python_facts(python)}{remote_sh.DISK_FREE}if command -v sbatch >/dev/null 2>&1; then echo sbatch=yes; else echo sbatch=no; exit 0; fi
$T sinfo -h -N -O 'Partition:|,NodeList:|,StateLong:|,Gres:|,GresUsed:|' 2>&1 | head -n 500 | sed 's/^/node=/'
$T squeue -h -u "$(id -un)" -O 'JobID:|,Partition:|,State:|,Reason:|,Name:|' 2>/dev/null | head -n 200 | sed 's/^/job=/'
"""


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    nodes: dict[str, str] = field(default_factory=dict)  # node -> state
    gpus_total: int = 0
    gpus_used: int = 0

    def summary(self) -> str:
        states: dict[str, int] = {}
        for s in self.nodes.values():
            states[s] = states.get(s, 0) + 1
        nodes = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        star = "*" if self.default else ""
        return (f"{self.name}{star}: {len(self.nodes)} node(s) ({nodes}); "
                f"GPUs {self.gpus_total - self.gpus_used} free of {self.gpus_total}")


def _gpu_count(gres: str) -> int:
    """`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8`: the number of GPUs in a GRES text."""
    total = 0
    for part in gres.split(","):
        part = part.split("(")[0]
        bits = part.split(":")
        if bits[0] == "gpu" and len(bits) >= 2 and bits[-1].isdigit():
            total += int(bits[-1])
    return total


def parse_partitions(rows: Sequence[str]) -> list[Partition]:
    """`sinfo -N -O` rows (`part|node|state|gres|gres_used|`) into partitions, default first."""
    parts: dict[str, Partition] = {}
    seen: set[tuple[str, str]] = set()
    for row in rows:
        cells = [safe_line(c.strip())[:120] for c in row.split(_SEP)]
        if len(cells) < 5 or not cells[0]:
            continue
        name, node, state, gres, used = cells[:5]
        default = name.endswith("*")
        name = name.rstrip("*")
        p = parts.get(name) or Partition(name, default)
        if (name, node) not in seen:
            seen.add((name, node))
            p = replace(p, nodes={**p.nodes, node: state},
                        gpus_total=p.gpus_total + _gpu_count(gres),
                        gpus_used=p.gpus_used + _gpu_count(used))
        parts[name] = p
    # sinfo -N lists by node: show the default partition first, then by name.
    return sorted(parts.values(), key=lambda p: (not p.default, p.name))


def parse_preflight(host: str, output: str, python: str, options: SlurmOptions) -> probes.PreflightReport:
    """Checks for a login node: Slurm reachable, the partition exists, GPUs in it; python as a warning."""
    values = probes.parse_key_values(output)
    facts = {k: safe_line(v) for k, v in values}
    node_rows = [v for k, v in values if k == "node"]
    job_rows = [safe_line(v) for k, v in values if k == "job"]
    checks: list[probes.Check] = []
    py = facts.get("python", "missing")[:200]
    if py[:1].isdigit():
        checks.append(probes.Check("python", True, f"{python} {py} on the login node"))
    else:
        checks.append(probes.Check("python", False, f"{python} does not run on the login node "
                                   f"(compute nodes may differ): {py}", warning=True))
    trainer_ok = facts.get("trainer") == "ok"
    checks.append(probes.Check("trainer", trainer_ok,
                               "praisonai_train importable on the login node" if trainer_ok else
                               f"praisonai_train is not importable by {python} on the login node "
                               "(compute nodes may differ)", warning=not trainer_ok))
    partitions = parse_partitions(node_rows)
    if facts.get("sbatch") != "yes":
        checks.append(probes.Check("slurm", False, f"no sbatch on {host}: not a Slurm login node"))
    elif not partitions:
        why = safe_line(node_rows[0])[:200] if node_rows else "sinfo listed no partition"
        checks.append(probes.Check("slurm", False, f"sinfo failed: {why}"))
    else:
        checks.append(probes.Check("slurm", True, f"Slurm: {len(partitions)} partition(s)"))
        wanted = [p for p in partitions if p.name in options.partition.split(",")] if options.partition \
            else [p for p in partitions if p.default] or partitions[:1]
        if options.partition and not wanted:
            checks.append(probes.Check("partition", False, f"no partition {options.partition!r} "
                                       f"(there are: {', '.join(p.name for p in partitions)})"))
        for p in partitions:
            checks.append(probes.Check("partition", True, p.summary()))
        if wanted:
            top = max(p.gpus_total // max(1, len(p.nodes)) for p in wanted)
            need = options.gpus_per_node or 0
            if need > top:
                checks.append(probes.Check("gpus", False, f"needs {need} GPU(s) per node, "
                                           f"partition {wanted[0].name} has at most {top}"))
    checks.append(probes.Check("jobs", True, f"{len(job_rows)} job(s) of yours in the queue"))
    try:
        disk_kb = int(facts.get("disk_free_kb", ""))
        checks.append(probes.Check("disk", True, f"{probes.human_kb(disk_kb)} free in workdir"))
    except ValueError:
        disk_kb = None
        checks.append(probes.Check("disk", False, "free disk space unknown", warning=True))
    return probes.PreflightReport(
        host=host, reachable=True, checks=tuple(checks), python_version=py if py[:1].isdigit() else "",
        disk_free_kb=disk_kb, backend="slurm", partitions=tuple(partitions),
        jobs=tuple(job_rows), slurm_login=facts.get("sbatch") == "yes",
    )
