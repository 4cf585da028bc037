#!/bin/sh
# Written by rtrain-tui: the detached wrapper of one training run.
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
boot_id() {
  bi_f=/proc/sys/kernel/random/boot_id
  if [ -n "$RTRAIN_TEST_BOOT_ID_FILE" ] && [ -r "$RTRAIN_TEST_BOOT_ID_FILE" ]; then
    bi_f=$RTRAIN_TEST_BOOT_ID_FILE
  fi
  bi=none; read -r bi 2>/dev/null < "$bi_f"
}
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
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_dir() {
  if [ -d "$1/.rtrain" ]; then
    an=; [ -r "$1/.rtrain/attempt" ] && read -r an < "$1/.rtrain/attempt"
    # Host text, bounded as attempt_layout.MAX_ATTEMPT: a garbled number is attempt 1.
    case $an in ''|0*|*[!0-9]*|?????*) an=1;; esac
    [ "$an" -le 1000 ] || an=1
    # shellcheck disable=SC2034  # the answer, read by the scripts that call this
    ad=$1/.rtrain/attempts/$an aj=$1/.rtrain/attempts.jsonl
  else
    # shellcheck disable=SC2034  # the same
    an='' ad=$1 aj=$1/attempts.jsonl
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_no() {
  attempt_dir "$1"
  if [ -z "$an" ]; then
    an=1
    for an_d in "$1"/attempts/[0-9]*; do [ -d "$an_d" ] && an=$((an + 1)); done
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_begin() {
  ab_d=$1/.rtrain
  mkdir -p "$ab_d/attempts/$2" &&
    printf '%s\n' "$2" > "$ab_d/attempt.tmp" && mv -f "$ab_d/attempt.tmp" "$ab_d/attempt"
}
# shellcheck disable=SC2034  # read by the scripts that source this file
attempt_top='status status.tmp status_attempt stop_requested stopped launch.lock train.pid
  train.ident slurm_job_id submit_unknown submit_error submit_message gpus queued'
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
attempt_dir .
# shellcheck disable=SC2034  # rt_aj: read by the queue's and the retry loop's lines, when there are any
rt_ad=$ad rt_aj=$aj
mkdir -p "$rt_ad"
if proc_fields $$ && [ -n "$start" ]; then
  boot_id
  printf '%s %s\n' "$start" "$bi" > train.ident.tmp && mv train.ident.tmp train.ident
fi
echo $$ > train.pid.tmp && mv train.pid.tmp train.pid
trap 'rt_signalled=1' TERM INT HUP
[ -n "${PYTHONUNBUFFERED+set}" ] || { PYTHONUNBUFFERED=1; export PYTHONUNBUFFERED; }
export HF_HOME='/scratch/it'"'"'s here'
export WANDB_MODE=offline
box_dir() {
  bx_h=; read -r bx_h 2>/dev/null < /proc/sys/kernel/hostname
  [ -n "$bx_h" ] || bx_h=$(uname -n 2>/dev/null)
  case $bx_h in *[!A-Za-z0-9._-]*) bx_h=$(printf '%s' "$bx_h" | tr -c 'A-Za-z0-9._-' _);; esac
  if [ -n "${HOME-}" ] && [ -n "$bx_h" ]; then
    bx=${HOME%/}/.local/state/rtrain-tui/gpus-$bx_h
  else
    bx=${1%/}/.queue
  fi
}
box_record() {
  box_dir "${1%/*}"
  [ -d "$bx/held" ] || mkdir -p "$bx/held" 2>/dev/null || return 1
  # shellcheck disable=SC2046  # cksum's two words (sum, length), split on purpose
  set -- "$1" $(printf '%s' "$1" | cksum)
  br_f=$bx/held/${1##*/}-$2-$3
  printf '%s\n' "$1" > "$br_f.tmp" && mv "$br_f.tmp" "$br_f" || return 1
  br_w=${1%/*}
  if [ -r "$bx/workdirs" ]; then
    while IFS= read -r br_l; do [ "$br_l" = "$br_w" ] && return 0; done < "$bx/workdirs"
  fi
  printf '%s\n' "$br_w" >> "$bx/workdirs"
}
# The GPUs this run has, for the host's queue and every client (gpu_rule.sh), in the
# box's records; a start that chose them recorded them already (and a queued run just did).
case ${CUDA_VISIBLE_DEVICES-x} in
  ''|*[!0-9,]*) ;;
  *) [ -e gpus ] || { echo "$CUDA_VISIBLE_DEVICES" > gpus.tmp && mv gpus.tmp gpus && box_record "$PWD"; };;
esac
rt_dir=$PWD
{ ~/venv/bin/python -m praisonai_train llm 'data set'"'"'s.jsonl' --config config.yaml
} > train.log 2>&1 < /dev/null
rc=$?
cd "$rt_dir" || exit "$rc"
end_rest
echo $rc > status.tmp && mv status.tmp status
