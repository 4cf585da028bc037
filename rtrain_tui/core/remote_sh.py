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
from collections.abc import Sequence

from rtrain_tui.core import validate

# Shell helpers shared by the scripts that need to tell whether a process lives.
#
# proc_fields PID: sets state, pgrp and start (field 3, 5 and 22 of /proc/PID/stat).
#   The command name (field 2) may hold spaces and ')', so strip through the last ') '.
# is_live PID IDENT: true when PID is a live, non-zombie process and, when IDENT
#   ("<starttime> <boot id>") is known, the same process that was recorded, so a
#   recycled pid never reads as running.
_LIVENESS = r"""
proc_fields() {
  state= pgrp= start=
  if [ -d /proc/self ]; then
    read -r pf_line 2>/dev/null < "/proc/$1/stat" || return 1
    pf_rest=${pf_line##*) }
    set -- $pf_rest
    state=$1 pgrp=$3 start=${20}
  else
    pf_line=$(ps -o stat= -o pgid= -p "$1" 2>/dev/null) || return 1
    set -- $pf_line
    state=$1 pgrp=$2
  fi
  [ -n "$state" ]
}
boot_id() { bi=none; read -r bi 2>/dev/null < /proc/sys/kernel/random/boot_id; }
# Read a one-line file into a variable without forking (probes run this per run).
read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
is_live() {
  case $1 in ''|*[!0-9]*) return 1;; esac
  proc_fields "$1" || return 1
  case $state in Z*|X*|x*) return 1;; esac
  if [ -n "$2" ]; then
    boot_id
    [ "$2" = "$start $bi" ] || return 1
  fi
  return 0
}
group_live_count() {
  glc=0
  if [ -d /proc/self ]; then
    for glc_stat in /proc/[0-9]*/stat; do
      read -r glc_line 2>/dev/null < "$glc_stat" || continue
      glc_rest=${glc_line##*) }
      set -- $glc_rest
      if [ "$3" = "$GROUP" ]; then
        case $1 in Z*|X*|x*) ;; *) glc=$((glc + 1));; esac
      fi
    done
  else
    glc=$(ps -e -o pgid= -o stat= 2>/dev/null | awk -v g="$GROUP" '$1 == g && $2 !~ /^Z/' | wc -l)
  fi
  echo "$glc"
}
"""


def _workdir_assign(workdir: str) -> str:
    # `set --` makes the shell tilde-expand the (validated, unquoted) workdir word.
    return f"set -- {workdir}; wd=$1"


def resolve_workdir(workdir: str) -> str:
    """Print the absolute workdir, as the remote shell expands it."""
    return f'{_workdir_assign(workdir)}\ncase $wd in /*) ;; *) wd=$(pwd)/$wd;; esac\nprintf "%s\\n" "$wd"\n'


def preflight(python: str, workdir: str) -> str:
    """Print key=value facts about the host: python, trainer, GPUs, disk, setsid."""
    py = shlex.quote(python)
    return f"""{_workdir_assign(workdir)}
echo "os=$(uname -s 2>/dev/null)"
if command -v timeout >/dev/null 2>&1; then T="timeout 10"; else T=; fi
if command -v {py} >/dev/null 2>&1; then
  $T {py} -c 'import sys, importlib.util as u
print("python=%d.%d.%d" % sys.version_info[:3])
print("trainer=" + ("ok" if u.find_spec("praisonai_train") else "missing"))' 2>&1 | sed -n '1,5p'
else
  echo "python=missing"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  smi=$($T nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu \\
     --format=csv,noheader,nounits 2>&1)
  rc=$?
  [ -n "$smi" ] && printf '%s\n' "$smi" | sed 's/^/gpu=/'
  echo "nvidia_smi=$rc"
else
  echo "nvidia_smi=missing"
fi
d=$wd
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "disk_free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {{print $4}}')"
if command -v setsid >/dev/null 2>&1; then echo setsid=yes; else echo setsid=no; fi
"""


def make_run_dir(workdir: str, run_id: str) -> str:
    """Create workdir (0700) and the run dir; print `exists` or the absolute run dir."""
    return f"""{_workdir_assign(workdir)}
mkdir -p -m 700 "$wd" || exit 1
cd "$wd" || exit 1
if ! mkdir -m 700 {run_id} 2>/dev/null; then echo exists; exit 0; fi
echo "dir=$(pwd)/{run_id}"
"""


def wrapper(trainer_cmd: str, env: dict[str, str]) -> str:
    """The `run.sh` that runs detached in the run dir.

    It records its own pid and identity, runs the trainer with stdin from /dev/null and
    its output in train.log, and writes the exit code to `status`. The trap keeps the
    wrapper alive on SIGTERM just long enough to record the trainer's code (a handler,
    unlike an ignore, is not inherited by the trainer).
    """
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return f"""#!/bin/sh
# Written by rtrain-tui: the detached wrapper of one training run.
{_LIVENESS}
proc_fields $$
boot_id
printf '%s %s\\n' "$start" "$bi" > train.ident
echo $$ > train.pid.tmp && mv train.pid.tmp train.pid
trap 'rt_signalled=1' TERM INT HUP
{exports}{trainer_cmd} > train.log 2>&1 < /dev/null
rc=$?
echo $rc > status.tmp && mv status.tmp status
"""


def launch(run_dir: str) -> str:
    """Start run.sh detached in its own session and wait until it has written train.pid."""
    rd = shlex.quote(run_dir)
    return f"""cd {rd} || {{ echo "error=no run directory"; exit 0; }}
if [ -e train.pid ]; then echo "error=already launched"; exit 0; fi
if command -v setsid >/dev/null 2>&1; then
  setsid sh ./run.sh >/dev/null 2>&1 </dev/null &
else
  # No setsid: job control gives the job its own process group, nohup shields it
  # from the hangup when this session ends.
  set -m
  nohup sh ./run.sh >/dev/null 2>&1 </dev/null &
fi
i=0
while [ ! -s train.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
echo "pid=$(cat train.pid 2>/dev/null)"
"""


def run_states(runs: Sequence[tuple[str, str]]) -> str:
    """Print one tab-separated line per (workdir, run id): its index, then key=value facts.

    This is the one probe per host per refresh: every run on the host in one script.
    """
    lines = [_LIVENESS]
    lines.append(r"""probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/train.pid"; pid=$rf; read_file "$rd/train.ident"; ident=$rf
  if is_live "$pid" "$ident"; then alive=1; else alive=0; fi
  read_file "$rd/status"; code=$rf
  # After a stop we issued, "stopped" means the whole group is gone: count it.
  read_file "$rd/stop_requested"; stop_group=$rf; group_left=
  case $stop_group in
    ''|*[!0-9]*) stop_group=;;
    # `stopped` is written once a stop saw the group gone: no need to scan /proc again.
    *) if [ -e "$rd/stopped" ]; then group_left=0
       else GROUP=$stop_group; group_left=$(group_live_count); fi;;
  esac
  printf '%s\texists=1\tpid=%s\talive=%s\tcode=%s\tstop_group=%s\tgroup_left=%s\n' \
    "$1" "$pid" "$alive" "$code" "$stop_group" "$group_left"
}""")
    for i, (workdir, run_id) in enumerate(runs):
        lines.append(f"probe {i} {run_dir_word(workdir, run_id)}")
    return "\n".join(lines) + "\n"


def run_dir_word(workdir: str, run_id: str) -> str:
    """A run dir as one shell word, left unquoted so that a leading `~` expands.

    Safe because both parts are re-validated here: nothing in them is special to sh.
    """
    validate.check_workdir("host", workdir)
    validate.check_run_id(run_id)
    return f"{workdir.rstrip('/') or '/'}/{run_id}"


def stop_signal(workdir: str, run_id: str) -> str:
    """Find the run's process group and send it SIGTERM, unless it is our own group.

    `stop_requested` records the group first: from then on the run reads `stopped`
    exactly when every member of that group is gone.
    """
    return f"""{_LIVENESS}
set -- {run_dir_word(workdir, run_id)}; rd=$1
read_file "$rd/train.pid"; pid=$rf; read_file "$rd/train.ident"; ident=$rf
if ! is_live "$pid" "$ident"; then echo result=not_running; exit 0; fi
group=$pgrp
proc_fields $$; own=$pgrp
if [ -z "$group" ] || [ "$group" -le 1 ] || [ "$group" = "$own" ]; then
  echo "result=refused"; echo "group=$group"; exit 0
fi
echo "$group" > "$rd/stop_requested"
kill -TERM -"$group" 2>/dev/null
echo result=term_sent; echo "group=$group"
"""


def group_alive(group: int) -> str:
    """Print how many live (non-zombie) processes are left in the process group."""
    return f"{_LIVENESS}\nGROUP={int(group)}\necho \"alive=$(group_live_count)\"\n"


def group_kill(group: int) -> str:
    return f"kill -KILL -{int(group)} 2>/dev/null; echo killed=1\n"


def mark_stopped(workdir: str, run_id: str) -> str:
    """Record that a stop saw the whole group gone, so later probes need not scan /proc."""
    return f"set -- {run_dir_word(workdir, run_id)}; rd=$1\n: > \"$rd/stopped\" && echo marked=1\n"


def link_or_copy(source: str, target: str) -> str:
    """Hard-link `source` to `target` (same file system), copying where links fail."""
    src, dst = shlex.quote(source), shlex.quote(target)
    return f"{{ ln -- {src} {dst} 2>/dev/null || cp -- {src} {dst}; }} && echo linked=1\n"


def checksums(directory: str, rel_paths: Sequence[str]) -> str:
    """Print `sha256  path` for each file, relative to an absolute directory."""
    files = " ".join(shlex.quote(p) for p in rel_paths)
    return (
        f"cd {shlex.quote(directory)} || exit 1\n"
        "if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; "
        "else S='shasum -a 256'; fi\n"
        f"$S -- {files}\n"
    )
