"""The `sh` text sent to a host: small pure functions, one per remote operation.

Every value interpolated here is either validated (run id, workdir) or passed through
`shlex.quote`. The workdir is the one value left unquoted, on purpose, so that the
remote shell expands its `~`; `validate.check_workdir` restricts it to characters that
no shell treats specially. Output is line-oriented `key=value` (tab-separated where a
line describes one run) so the parsers in `probes.py` never eval anything.

Scripts run inside a subshell of the host's long-lived `sh` (see `connection.py`), so
they may `exit`, `cd` and set variables freely. They target POSIX `sh` plus Linux
`/proc`, with `ps` as a fallback where `/proc` is missing.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence

from rtrain_tui.core import validate

# Shell helpers shared by the scripts that need to tell whether a run's processes live.
#
# How a run's processes are recognised (a recycled pid can fake none of it):
# - runs started by rtrain-tui carry `RTRAIN_RUN=<token>` in their environment, set when
#   the wrapper is launched and inherited by every process it starts, even those that
#   leave its session (`setsid`: every torchrun worker does). `train.token` holds the
#   token. A zombie's environ reads empty, so a zombie is never a member.
# - the wrapper itself is also known by `train.ident` (<start time> <boot id>).
# - a run without either (started by `praisonai train remote`) is its `train.pid`
#   process and group, if that process works in the run directory (its cwd).
# Pid 0/1 and the process groups of this script and of the host's long-lived shell
# (`RT_SHELL`, see connection.py) are never a run. `RT_PROC` exists so tests can play a
# host without /proc, where `ps` answers instead (no identity checks possible there).
_LIVENESS = r"""
proc=${RT_PROC:-/proc}
nl='
'
proc_fields() {
  state='' pgrp='' start=''
  if [ -d "$proc/self" ]; then
    read -r pf_line 2>/dev/null < "$proc/$1/stat" || return 1
    pf_rest=${pf_line##*) }
    # shellcheck disable=SC2086  # stat's fields, split on purpose (the name is cut off)
    set -- $pf_rest
    state=$1 pgrp=$3 start=${20}
  else
    pf_line=$(ps -o stat= -o pgid= -p "$1" 2>/dev/null) || return 1
    # shellcheck disable=SC2086  # ps's two fields, split on purpose
    set -- $pf_line
    state=$1 pgrp=$2
  fi
  [ -n "$state" ]
}
boot_id() { bi=none; read -r bi 2>/dev/null < /proc/sys/kernel/random/boot_id; }
# Read a one-line file into a variable without forking (probes run this per run).
read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
own_groups() {
  proc_fields $$; own_pgrp=$pgrp
  sh_pgrp=$own_pgrp
  if [ -n "$RT_SHELL" ] && proc_fields "$RT_SHELL"; then sh_pgrp=$pgrp; fi
}
# usable PID: a live, non-zombie process that is neither pid 0/1 nor in our own groups.
usable() {
  case $1 in ''|*[!0-9]*|0|1) return 1;; esac
  proc_fields "$1" || return 1
  case $state in Z*|X*|x*) return 1;; esac
  [ "$pgrp" != "$own_pgrp" ] && [ "$pgrp" != "$sh_pgrp" ]
}
# is_live PID IDENT RUNDIR: the run's recorded process, still the same process.
is_live() {
  usable "$1" || return 1
  [ -d "$proc/self" ] || return 0
  if [ -n "$2" ]; then
    boot_id
    [ "$2" = "$start $bi" ]
  else
    # Same directory: compared by physical path, as POSIX `test` has no `-ef`. Only a
    # run without an identity (started by `praisonai train remote`) costs this fork.
    [ -n "$3" ] || return 1
    il_p=$(cd -P -- "$proc/$1/cwd" 2>/dev/null && pwd -P && cd -P -- "$3" 2>/dev/null && pwd -P) &&
      [ "${il_p%%"$nl"*}" = "${il_p#*"$nl"}" ]
  fi
}
# marked_pids TOKEN: every process that carries the run's environment marker.
marked_pids() {
  [ -d "$proc/self" ] || return 0
  case $1 in ''|*[!0-9a-f]*) return 0;; esac
  # shellcheck disable=SC2013  # file names, /proc/N/environ: one word each
  for mp_file in $(grep -l -s -a -z -x -F "RTRAIN_RUN=$1" "$proc"/[0-9]*/environ 2>/dev/null); do
    mp_pid=${mp_file#"$proc"/}; echo "${mp_pid%/environ}"
  done
}
# group_pids GROUP: every process in the process group.
group_pids() {
  if [ -d "$proc/self" ]; then
    for gp_stat in "$proc"/[0-9]*/stat; do
      read -r gp_line 2>/dev/null < "$gp_stat" || continue
      gp_rest=${gp_line##*) }
      # shellcheck disable=SC2086  # stat's fields, split on purpose
      set -- $gp_rest
      [ "$3" = "$GROUP" ] && { gp_pid=${gp_stat#"$proc"/}; echo "${gp_pid%/stat}"; }
    done
  else
    ps -e -o pid= -o pgid= 2>/dev/null | awk -v g="$GROUP" '$2 == g {print $1}'
  fi
}
# run_members RUNDIR: sets `members` to the run's live pids, space-separated. Command
# substitutions have finished (and their processes are reaped) before any candidate is
# checked, so the scan never counts its own helpers.
run_members() {
  read_file "$1/train.pid"; rm_pid=$rf; read_file "$1/train.ident"; rm_ident=$rf
  read_file "$1/train.token"; rm_token=$rf
  rm_all=$(marked_pids "$rm_token")
  if is_live "$rm_pid" "$rm_ident" "$1"; then rm_all="$rm_all $(GROUP=$pgrp; group_pids)"; fi
  live_of "$rm_all"
  # shellcheck disable=SC2034  # the answer, read by the scripts that call this
  members=$live
}
# live_of CANDIDATES: sets `live` to the distinct usable pids among them, never this shell.
live_of() {
  live=
  for lo_m in $1; do
    case " $live " in *" $lo_m "*) continue;; esac
    [ "$lo_m" != "$$" ] && usable "$lo_m" && live="$live $lo_m"
  done
}
# Live marked processes of all runs, gathered once per script (one grep, whatever the
# number of runs) and only when some run needs it.
marks_loaded=
run_marked() {
  case $1 in ''|*[!0-9a-f]*) return 1;; esac
  if [ -z "$marks_loaded" ]; then
    marks_loaded=1
    all_marks=$(grep -h -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' "$proc"/[0-9]*/environ 2>/dev/null | tr '\0' '\n')
  fi
  case "
$all_marks
" in *"
RTRAIN_RUN=$1
"*) return 0;; esac
  return 1
}
"""


def workdir_assign(workdir: str) -> str:
    # `set --` makes the shell tilde-expand the (validated, unquoted) workdir word.
    return f"set -- {workdir}; wd=$1"


def resolve_workdir(workdir: str) -> str:
    """Print the absolute workdir, as the remote shell expands it."""
    return f'{workdir_assign(workdir)}\ncase $wd in /*) ;; *) wd=$(pwd)/$wd;; esac\nprintf "%s\\n" "$wd"\n'


def python_facts(python: str) -> str:
    """Print `python=X.Y.Z` (or `missing`) and whether the trainer imports; sets $T.

    Shared by the preflight of a box and of a Slurm login node.
    """
    py = validate.python_word(python)  # `~/` is left for the remote shell to expand
    return f"""if command -v timeout >/dev/null 2>&1; then T="timeout 10"; else T=; fi
if command -v {py} >/dev/null 2>&1; then
  $T {py} -c 'import sys, importlib.util as u
print("python=%d.%d.%d" % sys.version_info[:3])
print("trainer=" + ("ok" if u.find_spec("praisonai_train") else "missing"))' 2>&1 | sed -n '1,5p'
else
  echo "python=missing"
fi
"""


# Free space where the workdir is (or its nearest existing parent): needs $wd.
DISK_FREE = """d=$wd
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "disk_free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}')"
"""


def preflight(python: str, workdir: str) -> str:
    """Print key=value facts about the host: python, trainer, GPUs, disk, setsid."""
    return f"""{workdir_assign(workdir)}
echo "os=$(uname -s 2>/dev/null)"
{python_facts(python)}if command -v nvidia-smi >/dev/null 2>&1; then
  # At most 65 rows of 512 bytes are passed on (65 > MAX_GPUS marks it malformed): a
  # broken driver printing 400,000 lines must not flood the connection or the client.
  {{ $T nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu \\
       --format=csv,noheader,nounits 2>&1; echo "rt_smi_rc=$?"; }} |
    awk '/^rt_smi_rc=[0-9]+$/ {{ print "nvidia_smi=" substr($0, 11); next }}
         ++n <= 65 {{ print "gpu=" substr($0, 1, 512) }}'
else
  echo "nvidia_smi=missing"
fi
{DISK_FREE}if command -v setsid >/dev/null 2>&1; then echo setsid=yes; else echo setsid=no; fi
if command -v sbatch >/dev/null 2>&1; then echo sbatch=yes; fi
"""


def check_token(token: str) -> str:
    """A run token is lowercase hex: it reaches scripts and grep patterns unquoted."""
    if not (8 <= len(token) <= 64) or not all(c in "0123456789abcdef" for c in token):
        raise ValueError(f"bad run token {token!r}")
    return token


def make_run_dir(workdir: str, run_id: str, token: str) -> str:
    """Create workdir (0700) and the run dir with `train.token`; print `exists` or its path.

    Idempotent: sent again after a dropped connection, it finds its own token and
    answers the same, so a retry never reads as "someone else's run".
    """
    run_dir_word(workdir, run_id)  # validates both parts
    tok = check_token(token)
    return f"""{workdir_assign(workdir)}
# shellcheck disable=SC2174  # only the workdir itself is made private, not its parents
mkdir -p -m 700 "$wd" || exit 1
cd "$wd" || exit 1
if mkdir -m 700 {run_id} 2>/dev/null; then printf '%s\\n' {tok} > {run_id}/train.token; fi
rf=; [ -r {run_id}/train.token ] && read -r rf < {run_id}/train.token
if [ "$rf" = {tok} ]; then echo "dir=$(pwd)/{run_id}"; else echo exists; fi
"""


def remove_unlaunched(workdir: str, run_id: str, token: str) -> str:
    """Remove a run dir we created but never launched (a start that failed or was cancelled)."""
    tok = check_token(token)
    return f"""set -- {run_dir_word(workdir, run_id)}; rd=$1
rf=; [ -r "$rd/train.token" ] && read -r rf < "$rd/train.token"
if [ ! -d "$rd" ]; then echo removed=gone
elif [ "$rf" = {tok} ] && [ ! -e "$rd/launch.lock" ] && [ ! -e "$rd/train.pid" ]; then
  rm -rf -- "$rd" && echo removed=1
else echo removed=0; fi
"""


# The wrapper's own end: once the trainer has exited (any way), what is left of the run
# (its dataloader workers, torchrun workers in sessions of their own) gets SIGTERM,
# RT_GRACE seconds, then SIGKILL, before the exit code is recorded, so nothing holds GPU
# memory under a run that reads as ended.
_END_REST = r"""
rest_of_run() {
  live_of "$(marked_pids "$RTRAIN_RUN") $(GROUP=$$; group_pids)"; rr_left=$live
}
end_rest() {
  own_pgrp=none sh_pgrp=none  # the wrapper's own group is the run's: nothing to spare
  rest_of_run
  [ -n "$rr_left" ] || return 0
  # shellcheck disable=SC2086  # a list of pids
  kill -TERM $rr_left 2>/dev/null
  er_i=0
  while [ $er_i -lt $((${RT_GRACE:-10} * 5)) ]; do
    rest_of_run
    [ -n "$rr_left" ] || return 0
    sleep 0.2; er_i=$((er_i + 1))
  done
  # shellcheck disable=SC2086  # a list of pids
  kill -KILL $rr_left 2>/dev/null
}
"""


# Python buffers stdout that goes to a file: a real Trainer's loss lines reached train.log
# in 8 KiB bursts, long after the bar had moved on, so every point landed at a wrong step.
# Set unless the trainer's environment already says (the user's `--env` comes after it).
UNBUFFERED = """[ -n "${PYTHONUNBUFFERED+set}" ] || { PYTHONUNBUFFERED=1; export PYTHONUNBUFFERED; }
"""


def wrapper(trainer_cmd: str, env: dict[str, str]) -> str:
    """The `run.sh` that runs detached in the run dir.

    It records its own pid and identity, runs the trainer with stdin from /dev/null and
    its output in train.log, ends whatever is left of the run, and writes the exit code
    to `status`. The trap keeps the wrapper alive on SIGTERM just long enough to record
    the trainer's code (a handler, unlike an ignore, is not inherited by the trainer).
    """
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return f"""#!/bin/sh
# Written by rtrain-tui: the detached wrapper of one training run.
{_LIVENESS}{_END_REST}
if proc_fields $$ && [ -n "$start" ]; then
  boot_id
  printf '%s %s\\n' "$start" "$bi" > train.ident.tmp && mv train.ident.tmp train.ident
fi
echo $$ > train.pid.tmp && mv train.pid.tmp train.pid
trap 'rt_signalled=1' TERM INT HUP
{UNBUFFERED}{exports}{trainer_cmd} > train.log 2>&1 < /dev/null
rc=$?
end_rest
echo $rc > status.tmp && mv status.tmp status
"""


def launch(run_dir: str, token: str) -> str:
    """Start run.sh detached in its own session and wait until it has written train.pid.

    Idempotent: `launch.lock` is made with an atomic mkdir, and only the script that
    made it starts the wrapper, so sent again after a dropped connection it starts
    nothing and reports the pid of the one launch. `train.token` must hold our token:
    nobody else's run directory is ever launched.
    """
    rd = shlex.quote(run_dir)
    tok = check_token(token)
    return f"""cd {rd} || {{ echo "error=no run directory"; exit 0; }}
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != {tok} ]; then echo "error=not this start's run directory"; exit 0; fi
if mkdir launch.lock 2>/dev/null; then
  RTRAIN_RUN={tok}; export RTRAIN_RUN
  if command -v setsid >/dev/null 2>&1; then
    setsid sh ./run.sh >/dev/null 2>&1 </dev/null &
  else
    # No setsid: job control gives the job its own process group, nohup shields it
    # from the hangup when this session ends.
    set -m
    nohup sh ./run.sh >/dev/null 2>&1 </dev/null &
  fi
fi
i=0
while [ ! -s train.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
echo "pid=$(cat train.pid 2>/dev/null)"
"""


def run_states(runs: Sequence[tuple[str, str]], need_end: Collection[int] = (),
               gpus: bool = False) -> str:
    """Print one tab-separated line per (workdir, run id): its index, then key=value facts.

    This is the one probe per host per refresh: every run on the host in one script.
    A run whose wrapper lives costs no fork; the scan for marked processes runs only
    when a wrapper is gone without an exit code, once for all runs. For the runs listed
    in `need_end` (by position), an ended run also reports `ended=EPOCH`: when its
    `status` was written (else its log's last write), so its elapsed time is the host's
    and not when we happened to look. One `date` each, asked once per run. With `gpus`,
    the same script also reports the GPUs (the last background sample, and starts the
    next; see _GPU_SAMPLE_ASYNC): still one round trip.
    """
    lines = [_LIVENESS, "own_groups"]
    lines.append(r"""probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/train.pid"; pid=$rf; read_file "$rd/train.ident"; ident=$rf
  read_file "$rd/train.token"; token=$rf
  read_file "$rd/status"; code=$rf
  read_file "$rd/stop_requested"; stop=0; [ -n "$rf" ] && stop=1
  stopped=0; [ -e "$rd/stopped" ] && stopped=1
  launched=0; if [ -e "$rd/launch.lock" ] || [ -n "$pid" ]; then launched=1; fi
  alive=0
  if [ -z "$code" ] && [ $stopped = 0 ]; then
    if is_live "$pid" "$ident" "$rd" || run_marked "$token"; then alive=1; fi
  fi
  # The wrapper died at its last line: `echo $rc > status.tmp` made the file but a full
  # disk refused the code. Its code may still be there; else say how much space is left.
  unwritten=0; free=
  if [ $alive = 0 ] && [ -z "$code" ] && [ $stopped = 0 ] && [ -e "$rd/status.tmp" ]; then
    read_file "$rd/status.tmp"; code=$rf
    if [ -z "$code" ]; then
      unwritten=1; free=$(df -Pk "$rd" 2>/dev/null | awk 'NR == 2 { print $4 }')
    fi
  fi
  ended=
  if [ "$3" = 1 ] && [ $alive = 0 ] && [ -n "$pid$code" ]; then
    ef="$rd/status"; [ -e "$ef" ] || ef="$rd/train.log"
    [ -e "$ef" ] && ended=$(date -r "$ef" +%s 2>/dev/null)
  fi
  printf '%s\texists=1\tpid=%s\talive=%s\tcode=%s\tstop=%s\tstopped=%s\tlaunched=%s\tended=%s\tunwritten=%s\tfree_kb=%s\n' \
    "$1" "$pid" "$alive" "$code" "$stop" "$stopped" "$launched" "$ended" "$unwritten" "$free"
}""")
    for i, (workdir, run_id) in enumerate(runs):
        lines.append(f"probe {i} {run_dir_word(workdir, run_id)} {1 if i in need_end else 0}")
    if gpus:
        lines.append(_GPU_SAMPLE_ASYNC)
    return "\n".join(lines) + "\n"


# One GPU sample, appended to the per-host probe (`run_states(..., gpus=True)`): two
# nvidia-smi queries in one pipeline and one awk, so no extra round trip and few forks.
# awk bounds what is passed on (65 GPU rows of 512 bytes, 257 processes), as the
# preflight does, and resolves each GPU process's group and user from /proc and
# /etc/passwd itself (no `ps`, no fork per process). Our runs' processes are told by
# their RTRAIN_RUN marker: one grep over just those processes' environ files. Lines:
#   gpu=INDEX, UUID, UTIL, MEM_USED, MEM_TOTAL   (nvidia-smi's own row, bounded)
#   gpu_smi=RC | missing                          (124: timed out)
#   gpu_app=UUID,PID,USED_MIB,PGID,USER           (fields empty where unknown)
#   /proc/PID/environ:RTRAIN_RUN=TOKEN            (our run's marker on a GPU process)
_GPU_SAMPLE = r"""
if command -v nvidia-smi >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then gs_t="timeout 5"; else gs_t=; fi
  gs_out=$( { $gs_t nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total \
      --format=csv,noheader,nounits 2>&1; gs_rc=$?; echo "rt_smi_rc=$gs_rc"
    [ $gs_rc = 0 ] && $gs_t nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory \
      --format=csv,noheader,nounits 2>/dev/null; } |
    awk 'function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
      /^rt_smi_rc=[0-9]+$/ && !apps { print "gpu_smi=" substr($0, 11); apps = 1; next }
      !apps { if (++n <= 65) print "gpu=" substr($0, 1, 512); next }
      ++m <= 257 {
        split(substr($0, 1, 512), a, ","); pid = trim(a[2]); pg = ""; user = ""
        if (pid ~ /^[0-9]+$/ && length(pid) < 12) {
          f = "/proc/" pid "/stat"
          if ((getline l < f) > 0) { sub(/.*\) /, "", l); split(l, s, " "); pg = s[3] }
          close(f); f = "/proc/" pid "/status"
          while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, s, /[ \t]+/); user = s[2]; break }
          close(f)
          if (user != "") {
            if (!pw) { pw = 1; while ((getline l < "/etc/passwd") > 0) { split(l, s, ":"); name[s[3]] = s[1] } }
            if (user in name) user = name[user]; else user = "uid " user
          }
          envs = envs " /proc/" pid "/environ"
        } else pid = ""
        gsub(/,/, "", user)
        print "gpu_app=" trim(a[1]) "," pid "," trim(a[3]) "," pg "," substr(user, 1, 64)
      }
      END { if (envs != "") print "gpu_envs=" envs }')
  printf '%s\n' "$gs_out"
  # Only awk's last line starts with `gpu_envs=` (every host row got a prefix), and it
  # holds /proc/DIGITS/environ words only: safe to split unquoted.
  case $gs_out in
    *"
gpu_envs= /proc/"*)
    # shellcheck disable=SC2086  # words split on purpose (see above)
    grep -H -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' -- ${gs_out##*"
gpu_envs="} 2>/dev/null | tr '\0' '\n';;
  esac
else
  echo "gpu_smi=missing"
fi
"""


def gpu_sample() -> str:
    """One sample of every GPU on the host and who holds it, now (see _GPU_SAMPLE)."""
    return _GPU_SAMPLE


# The refresh probe's GPU part. nvidia-smi itself takes 10-50 ms on a real host (more
# without persistence mode), and the pipeline around it a few forks: too much for a probe
# that runs every 2 s per host. So the probe prints the last sample, taken in the
# background, and starts the next one: it costs a file read with builtins and one fork
# it does not wait for. Samples live in ~/.cache/rtrain-tui (0700). Each carries the
# host's uptime when it was taken (`gpu_uptime=`) and the probe says the uptime now
# (`gpu_now=`), so the client dates it without trusting either clock. A lock holding the
# uptime it was taken at keeps one sampler at a time; one older than 30 s is a dead
# sampler's and is broken. Hosts without /proc/uptime, or where ~/.cache cannot be
# written, are sampled in the probe itself (slower, but never blind). The sample file is
# named by the host's name and boot id: hosts that share one home (NFS) must never read
# each other's GPUs, nor one host a sample from before its reboot. A host whose name or
# boot id cannot be read (or holds odd characters) is sampled in the probe too.
_GPU_SAMPLE_ASYNC = r"""
gs_id=; gs_b=
read -r gs_id 2>/dev/null < /proc/sys/kernel/hostname; read -r gs_b 2>/dev/null < /proc/sys/kernel/random/boot_id
gs_id=$gs_id-$gs_b
case $gs_id in -*|*-|*[!A-Za-z0-9._-]*) gs_id=;; esac
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smi=missing"
elif [ -z "$gs_id" ] || [ ! -r /proc/uptime ] || [ -z "$HOME" ] || ! { gs_d=$HOME/.cache/rtrain-tui
    # shellcheck disable=SC2174  # ~/.cache, if new, is the user's ordinary directory
    [ -d "$gs_d" ] || mkdir -p -m 700 "$gs_d" 2>/dev/null; }; then
""" + _GPU_SAMPLE + r"""
else
  read -r gs_now _ < /proc/uptime; gs_now=${gs_now%.*}
  gs_f=$gs_d/gpu-sample-$gs_id
  echo "gpu_now=$gs_now"
  if [ -r "$gs_f" ]; then while IFS= read -r gs_l; do printf '%s\n' "$gs_l"; done < "$gs_f"; fi
  if [ -r "$gs_f.lock" ]; then
    gs_then=; read -r gs_then < "$gs_f.lock"
    case $gs_then in ''|*[!0-9]*) gs_then=0;; esac
    # Dead sampler: older than 30 s (its nvidia-smi calls are bounded by `timeout 5`;
    # without timeout(1) a hung one may still live: 600 s, so they never pile up), or
    # from before a reboot.
    gs_stale=30; command -v timeout >/dev/null 2>&1 || gs_stale=600
    if [ $((gs_now - gs_then)) -gt $gs_stale ] || [ "$gs_now" -lt "$gs_then" ]; then rm -f "$gs_f.lock"; fi
  fi
  set -C
  if { echo "$gs_now" > "$gs_f.lock"; } 2>/dev/null; then
    set +C
    {
      { read -r gs_up _ < /proc/uptime; echo "gpu_uptime=${gs_up%.*}"
""" + _GPU_SAMPLE + r"""
      } > "$gs_f.tmp" && mv -f "$gs_f.tmp" "$gs_f"
      rm -f "$gs_f.lock"
    } </dev/null >/dev/null 2>&1 &
  fi
  set +C
fi
"""


def run_dir_word(workdir: str, run_id: str) -> str:
    """A run dir as one shell word, left unquoted so that a leading `~` expands.

    Safe because both parts are re-validated here: nothing in them is special to sh.
    """
    validate.check_workdir("host", workdir)
    validate.check_run_id(run_id)
    return f"{workdir.rstrip('/') or '/'}/{run_id}"


def stop_signal(workdir: str, run_id: str, nonce: str, signal: str = "TERM") -> str:
    """Send `signal` to every member of the run, unless its pid file names our own group.

    The first call records `stop_requested` (holding this stop's nonce); from then on the
    run reads `stopped` once the stop is verified. Idempotent: sent again after a lost
    answer, it signals what is left, and if the first sending already ended the run it
    still answers `signalled` (its own nonce is on record), never "not running".
    """
    if signal not in ("TERM", "KILL"):
        raise ValueError(signal)
    tok = check_token(nonce)
    return f"""{_LIVENESS}
own_groups
set -- {run_dir_word(workdir, run_id)}; rd=$1
read_file "$rd/train.pid"; pid=$rf
if [ -n "$pid" ] && proc_fields "$pid" && {{ [ "$pgrp" = "$own_pgrp" ] || [ "$pgrp" = "$sh_pgrp" ]; }}; then
  echo "result=refused"; echo "group=$pgrp"; exit 0
fi
run_members "$rd"
if [ -z "$members" ]; then
  read_file "$rd/stop_requested"
  if [ "$rf" = {tok} ]; then echo result=signalled; echo count=0; else echo result=not_running; fi
  exit 0
fi
[ -e "$rd/stop_requested" ] || echo {tok} > "$rd/stop_requested"
# shellcheck disable=SC2086  # a list of pids
kill -{signal} $members 2>/dev/null
# shellcheck disable=SC2086  # counted as words
set -- $members; echo result=signalled; echo "count=$#"
"""


def run_alive_count(workdir: str, run_id: str) -> str:
    """Print how many live (non-zombie) members the run has."""
    return f"""{_LIVENESS}
own_groups
set -- {run_dir_word(workdir, run_id)}; rd=$1
run_members "$rd"
# shellcheck disable=SC2086  # counted as words
set -- $members; echo "alive=$#"
"""


def mark_stopped(workdir: str, run_id: str, code: int) -> str:
    """Record a verified stop: `status` as the seed's wrapper would (if none), then `stopped`.

    `status` lets `praisonai train remote tail` of the run end and agree; `stopped` is
    ours, so rtrain-tui still says `stopped`. Idempotent.
    """
    return f"""set -- {run_dir_word(workdir, run_id)}; rd=$1
[ -e "$rd/status" ] || {{ echo {int(code)} > "$rd/status.tmp" && mv "$rd/status.tmp" "$rd/status"; }}
: > "$rd/stopped" && echo marked=1
"""


def link_or_copy(source: str, target: str) -> str:
    """Hard-link `source` to `target` (same file system), copying where links fail."""
    src, dst = shlex.quote(source), shlex.quote(target)
    # `cmp` before `cp`: sent again after a dropped connection, the link already exists
    # and `cp` would refuse to copy a file onto itself (POSIX `test` has no `-ef`).
    return (f"{{ ln -- {src} {dst} 2>/dev/null || cmp -s -- {src} {dst} || cp -- {src} {dst}; }}"
            " && echo linked=1\n")


def checksums(directory: str, rel_paths: Sequence[str]) -> str:
    """Print `sha256  ./path` for each file, relative to an absolute directory.

    Each name gets `./` in front: sha256sum reads stdin for a file named `-` even after
    `--` (found by the property tests).
    """
    files = " ".join(shlex.quote(f"./{p}") for p in rel_paths)
    return (
        f"cd {shlex.quote(directory)} || exit 1\n"
        "if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; "
        "else S='shasum -a 256'; fi\n"
        f"$S -- {files}\n"
    )


# --- transfers (see transfer.py) ----------------------------------------------------
# One Python program on the host, run with the trainer's interpreter over one exec
# channel. Paths travel hex-encoded, so any name a POSIX file system allows (newline,
# backslash, non-UTF-8 bytes) crosses unchanged and nothing in them reaches a shell.
#
# Every mode first prints TRANSFER_GREETING's line, then:
# `list ROOT REL` / `send ROOT REL`: a listing of text lines, then `e`:
#   f SIZE MTIME_NS HEXPATH   a regular file (numbered 0, 1, … in listing order)
#   d HEXPATH                 a directory
#   s KIND HEXPATH            skipped: fifo, socket, device, loop, dangling, unreadable
#   x WHY HEXPATH             refused: `outside` (leaves the run dir) or `missing`
# `send` then reads lines of file numbers on stdin (an empty line ends) and, per number,
# answers `H` num size mtime (from fstat at open: the snapshot), exactly `size` bytes,
# and `T` ok sha256 — the hash computed in the same pass; ok=0 when the file shrank or
# failed to read (the bytes were padded). `S` num: the file is gone or is no longer a
# regular file. `B` ends a batch. Only regular files are ever opened (O_NONBLOCK and
# O_NOFOLLOW too), so a FIFO can never hang the stream.
#
# `recv DIR SIZE`: reads SIZE bytes and then a hex SHA-256 line from stdin into a
# temporary name of its own in DIR, hashing in the same pass; if the hashes agree the
# file is published as DIR/<sha256> (the first to publish wins, the others find it
# there), and it prints `ok=<sha256>`; else `error=...`. Every failure removes the
# temporary file; a full disk says `error=nospace`.
TRANSFER_PY = r"""
import errno, hashlib, os, stat, struct, sys
out = sys.stdout.buffer
# Pieces of a pipe's size: a 1 MiB read allocates (and page-faults in) fresh memory each
# time and half-fills it; 64 KiB pieces took a third of the CPU (tests/benchmarks/transfer.py).
PIECE = 1 << 16
GREETING = b"rtrain-transfer 1"
def line(*parts):
    out.write(b" ".join(parts) + b"\n")
def hx(b):
    return (b.hex() or "-").encode()
def unhex(s):
    return b"" if s == "-" else bytes.fromhex(s)
def listing(root, rel):
    root = os.path.realpath(root)
    pre = root.rstrip(b"/") + b"/"
    inside = lambda p: p == root or p.startswith(pre)
    files = []
    top = root if rel == b"." else os.path.join(root, rel)
    real = os.path.realpath(top)
    if not inside(real):
        line(b"x", b"outside", hx(rel)); return None
    try:
        st = os.stat(real)
    except OSError:
        line(b"x", b"missing", hx(rel)); return None
    def kind(m):
        if stat.S_ISFIFO(m): return b"fifo"
        if stat.S_ISSOCK(m): return b"socket"
        if stat.S_ISCHR(m) or stat.S_ISBLK(m): return b"device"
        return b"special"
    def walk(real, relp, chain):
        try:
            names = sorted(os.listdir(real))
        except OSError:
            line(b"s", b"unreadable", hx(relp)); return True
        for name in names:
            p = os.path.join(real, name)
            r = os.path.join(relp, name) if relp != b"." else name
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                p = os.path.realpath(p)
                if not inside(p):
                    line(b"x", b"outside", hx(r)); return False
                try:
                    st = os.stat(p)
                except OSError:
                    line(b"s", b"dangling", hx(r)); continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in chain or len(chain) > 64:
                    line(b"s", b"loop", hx(r)); continue
                line(b"d", hx(r))
                if not walk(p, r, chain | {key}):
                    return False
            elif stat.S_ISREG(st.st_mode):
                line(b"f", str(st.st_size).encode(), str(st.st_mtime_ns).encode(), hx(r))
                files.append(p)
            else:
                line(b"s", kind(st.st_mode), hx(r))
        return True
    if stat.S_ISDIR(st.st_mode):
        if not walk(real, rel, frozenset([(st.st_dev, st.st_ino)])):
            return None
    elif stat.S_ISREG(st.st_mode):
        line(b"f", str(st.st_size).encode(), str(st.st_mtime_ns).encode(), hx(rel))
        files.append(real)
    else:
        line(b"s", kind(st.st_mode), hx(rel))
    return files
def send(path, num):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        out.write(struct.pack(">cI", b"S", num)); return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            out.write(struct.pack(">cI", b"S", num)); return
        size = left = st.st_size
        out.write(struct.pack(">cIQQ", b"H", num, size, st.st_mtime_ns))
        h = hashlib.sha256(); ok = 1
        while left:
            try:
                b = os.read(fd, min(left, PIECE)) if ok else b""
            except OSError:
                b = b""
            if not b:
                ok = 0; b = bytes(min(left, PIECE))
            h.update(b); out.write(b); left -= len(b)
        out.write(struct.pack(">cB", b"T", ok) + h.digest())
    finally:
        os.close(fd)
def recv(d, size):
    tmp = os.path.join(d, b".up-%s.part" % os.urandom(8).hex().encode())
    fd = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        h = hashlib.sha256(); left = size
        while left:
            b = os.read(0, min(left, PIECE))
            if not b:
                line(b"error=short"); return
            h.update(b); left -= len(b)
            mv = memoryview(b)
            while mv:
                mv = mv[os.write(fd, mv):]
        os.close(fd); fd = None
        want = b""
        while not want.endswith(b"\n") and len(want) < 200:
            b = os.read(0, 65)
            if not b:
                break
            want += b
        want = want.strip().decode()
        if want != h.hexdigest():
            line(b"error=corrupt"); return
        final = os.path.join(d, want.encode())
        try:
            os.link(tmp, final)
        except FileExistsError:
            if os.stat(final).st_size != size:
                os.replace(tmp, final)
        line(b"ok=" + want.encode())
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            line(b"error=nospace")
        else:
            line(b"error=" + str(e).replace("\n", " ").encode("utf-8", "replace"))
    finally:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        out.flush()
def main():
    line(GREETING); out.flush()  # before anything else: the client knows it is us, not a banner
    mode = sys.argv[1]
    if mode == "recv":
        return recv(unhex(sys.argv[2]), int(sys.argv[3]))
    files = listing(unhex(sys.argv[2]), unhex(sys.argv[3]))
    line(b"e"); out.flush()
    if mode != "send" or files is None:
        return
    for req in sys.stdin.buffer:
        if not req.strip():
            break
        for n in req.split():
            send(files[int(n)], int(n))
        out.write(b"B"); out.flush()
main()
"""


# TRANSFER_PY's first line, before anything else it prints: a login banner on stdout or
# another program is told apart from its answers.
TRANSFER_GREETING = b"rtrain-transfer 1"


def transfer_command(python: str, mode: str, *args: bytes | int) -> str:
    """The exec command that runs TRANSFER_PY: one line, no quote inside the program.

    The program travels base64-encoded and every argument hex-encoded, so the command
    means the same to any login shell (sh, bash, zsh, fish, even csh, which refuses
    newlines inside quotes).
    """
    import base64

    if mode not in ("list", "send", "recv"):
        raise ValueError(mode)
    code = base64.b64encode(TRANSFER_PY.encode()).decode()
    words = [a.hex() or "-" if isinstance(a, bytes) else str(int(a)) for a in args]
    return (f"{validate.python_word(python)} -c "
            f"'import base64;exec(base64.b64decode(\"{code}\"))' {mode} {' '.join(words)}")


def upload_prepare(cache_dir: str, size: int) -> str:
    """Before shipping a dataset: make the store, drop stale parts, report space and twins.

    Prints `free_kb=N` and one `same=<name>` per stored dataset of exactly `size` bytes
    (only those can be this dataset, so only then is it worth hashing locally first).
    Temporary files older than a day are left by killed uploads: nothing trusts them,
    and they must not fill the disk. Only our own are removed, by their exact names: the
    store's `.up-*.part` (TRANSFER_PY's recv) and a run dir's `config.yaml.part` and
    `run.sh.part` (SFTP uploads); a trainer's or user's `*.part` in a run dir is theirs.
    """
    d = shlex.quote(cache_dir)
    return f"""d={d}
# shellcheck disable=SC2174  # only the store itself is made private, not its parents
mkdir -p -m 700 "$d" || exit 1
find "$d" -maxdepth 1 -type f -name '.up-*.part' -mmin +1440 -exec rm -f {{}} + 2>/dev/null
find "$d/.." -mindepth 2 -maxdepth 2 -type f \\( -name config.yaml.part -o -name run.sh.part \\) \\
  -mmin +1440 -exec rm -f {{}} + 2>/dev/null
echo "free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {{print $4}}')"
find "$d" -maxdepth 1 -type f ! -name '*.part' -size {int(size)}c 2>/dev/null | sed 's|.*/|same=|'
"""


# How many names `find_runs` looks at per workdir in the refresh probe: the newest, by
# the directory's mtime (a run dir's changes when its files are created, so a run started
# elsewhere is among the newest). A workdir with thousands of old runs then costs one
# `ls` per refresh, not thousands of tests, and at most this many output lines.
FIND_LIMIT = 200


def find_runs(workdirs: Sequence[str], known: Sequence[Collection[str]] = (),
              limit: int | None = None) -> str:
    """List the run directories under each workdir that the caller does not know.

    Prints `wd<TAB>i<TAB>ABSOLUTE WORKDIR` for each workdir, then
    `run<TAB>i<TAB>NAME<TAB>EPOCH` for each directory in it that holds what a run leaves
    (`train.pid`, `status` or `train.log`, from this tool or `praisonai train remote`),
    whose name can be a run id and is not in `known[i]` (run ids, as the index has them
    there); EPOCH is when it started (its config's, pid file's or log's time). Names
    that cannot be run ids (control characters, spaces, `$(...)`, a leading `-`, longer
    than 64) are skipped here, so no name can break the line format; `ls -q` turns a
    newline in a name into `?`. With `limit`, only the newest `limit` names that can be
    run ids are looked at, so the output is at most `limit` lines per workdir.

    Known names cost one `case` each and print nothing: a refresh that carries this
    listing prints only the `wd` lines when nothing new is there. Variables are
    prefixed `fr_` so the listing can precede another probe script in one round trip.
    """
    lines = []
    cap = "" if limit is None else f"fr_c=$((fr_c + 1)); [ $fr_c -le {int(limit)} ] || break\n  "
    count = "" if limit is None else "fr_c=0\n"
    for i, workdir in enumerate(workdirs):
        validate.check_workdir("host", workdir)
        names = [validate.check_run_id(n) for n in (sorted(known[i]) if i < len(known) else ())]
        lines.append(f"""set -- {workdir}; fr_wd=$1
case $fr_wd in /*) ;; *) fr_wd=$(pwd)/$fr_wd;; esac
printf 'wd\\t{i}\\t%s\\n' "$fr_wd"
fr_known={shlex.quote(" " + " ".join(names) + " ")}
# shellcheck disable=SC2012  # newest first needs `ls -t`; -q and the case below keep names to one safe line
ls -qt -- "$fr_wd/" 2>/dev/null | {{
{count}while IFS= read -r fr_n; do
  case $fr_n in ""|[!A-Za-z0-9]*|*[!A-Za-z0-9._-]*) continue;; esac
  [ ${{#fr_n}} -le 64 ] || continue
  {cap}case $fr_known in *" $fr_n "*) continue;; esac
  fr_d=$fr_wd/$fr_n
  [ -d "$fr_d" ] || continue
  [ -e "$fr_d/train.pid" ] || [ -e "$fr_d/status" ] || [ -e "$fr_d/train.log" ] || continue
  fr_t=
  for fr_f in config.yaml train.pid train.log status; do
    if [ -e "$fr_d/$fr_f" ]; then fr_t=$(date -r "$fr_d/$fr_f" +%s 2>/dev/null); break; fi
  done
  printf 'run\\t{i}\\t%s\\t%s\\n' "$fr_n" "$fr_t"
done; }}""")
    return "\n".join(lines) + "\n"
