"""The `sh` text the Slurm backend sends to a login node: one pure function per operation.

Every value interpolated here is validated (options.py, `validate`) or `shlex.quote`d;
the workdir follows `remote_sh.run_dir_word`. Answers are `key=value` lines (tab-separated
per run) read by parse.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from rtrain_tui.core import remote_sh
from rtrain_tui.core.backends.slurm.options import MASTER_PORT, SlurmOptions


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
            "# shellcheck disable=SC2088  # the trainer's command is sh -c's: a `~` expands there\n"
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

    The job id is the last line sbatch prints on stdout that is one (`ID` or
    `ID;CLUSTER`): a site's wrapper around sbatch may print a banner first. Clusters
    print notices on stderr (a `job_submit.lua` calling `slurm.log_user`: "sbatch: 12
    GPU-hours left"), which are kept in `submit_message` for the user and never mixed
    into the id. An sbatch that exits 0 with no such line may well have queued the job:
    that is `unknown=` (its stdout, kept in `submit_unknown`), and the lock stays.
    """
    rd = shlex.quote(run_dir)
    tok = remote_sh.check_token(token)
    return f"""cd {rd} || {{ echo "error=no run directory"; exit 0; }}
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != {tok} ]; then echo "error=not this start's run directory"; exit 0; fi
if ! command -v sbatch >/dev/null 2>&1; then echo "error=sbatch not found on the login node"; exit 0; fi
if mkdir launch.lock 2>/dev/null; then
  rm -f submit_error submit_message submit_unknown
  if out=$(sbatch --parsable run.sbatch 2>submit_message.tmp < /dev/null); then
    [ -s submit_message.tmp ] && tr '\\n' ' ' < submit_message.tmp > submit_message
    id=$(printf '%s\\n' "$out" | awk -F';' '$1 ~ /^[0-9]+(_[0-9]+)?$/ {{ id = $1 }} END {{ print id }}')
    if [ -n "$id" ]; then printf '%s\\n' "$id" > slurm_job_id.tmp && mv slurm_job_id.tmp slurm_job_id
    else printf '%s\\n' "${{out:-(nothing)}}" | tr '\\n' ' ' > submit_unknown; fi
  else
    {{ cat submit_message.tmp; printf '%s\\n' "$out"; }} | tr '\\n' ' ' > submit_error; rmdir launch.lock
  fi
  rm -f submit_message.tmp
fi
i=0
while [ ! -s slurm_job_id ] && [ ! -s submit_error ] && [ ! -s submit_unknown ] && [ $i -lt 300 ]; do
  sleep 0.1; i=$((i + 1))
done
if [ -s slurm_job_id ]; then echo "job=$(cat slurm_job_id)"
elif [ -s submit_error ]; then echo "error=$(head -c 300 submit_error)"
elif [ -s submit_unknown ]; then echo "unknown=$(head -c 300 submit_unknown)"
else echo "error=sbatch gave no job id within 30 s"; fi
if [ ! -s submit_error ] && [ -s submit_message ]; then echo "message=$(head -c 300 submit_message)"; fi
"""



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


# -- preflight --------------------------------------------------------------------------------
def preflight(python: str, workdir: str) -> str:
    """Facts about a login node: python/trainer, disk, and Slurm's partitions and our jobs."""
    return f"""{remote_sh.workdir_assign(workdir)}
{remote_sh.python_facts(python)}{remote_sh.DISK_FREE}if command -v sbatch >/dev/null 2>&1; then echo sbatch=yes; else echo sbatch=no; exit 0; fi
$T sinfo -h -N -O 'Partition:|,NodeList:|,StateLong:|,Gres:|,GresUsed:|' 2>&1 | head -n 500 | sed 's/^/node=/'
$T squeue -h -u "$(id -un)" -O 'JobID:|,Partition:|,State:|,Reason:|,Name:|' 2>/dev/null | head -n 200 | sed 's/^/job=/'
"""
