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
rt_np=~/venv/bin/python
rt_non='failed stalled'
rt_nw=''
# shellcheck disable=SC2034  # sw_why: the answer, read by the caller that needs it
state_word() {
  sw_why=
  if [ "$1" != 1 ]; then sw=unknown
  elif [ "$2" = 1 ]; then sw=stopped
  elif [ -n "$4" ]; then
    # A stop we asked for is `stopped`, whatever the trainer answered its TERM with.
    if [ "$3" = 1 ]; then sw=stopped
    elif [ "$4" = 0 ]; then sw=completed
    else sw="failed (exit $4)"; fi
  elif [ "$5" = 1 ]; then sw=queued
  elif [ "$6" = 1 ]; then sw=running
  elif [ "$3" = 1 ]; then sw=stopped
  elif [ "$7" = 1 ]; then sw=failed
  elif [ "$8" = 1 ]; then sw=starting; sw_why="submitting the job to the scheduler"
  elif [ "$9" != 1 ]; then sw=unknown
  else sw=lost; fi
}
claim_mark() {
  attempt_no "$1"
  # shellcheck disable=SC2154  # `an`: attempt.sh's, which every script sends before this
  cm_n=$an
  cm_m="$1/notified/a$cm_n-$2"
  mkdir "$1/notified" 2>/dev/null
  if mkdir "$cm_m" 2>/dev/null; then
    [ -z "$3" ] || printf '%s\n' "$3" > "$cm_m/by"
    return 0
  fi
  [ -n "$3" ] && [ "$(cat "$cm_m/by" 2>/dev/null)" = "$3" ]
}
claim() {
  if [ ! -d "$2" ]; then printf 'claim\t%s\tmissing\n' "$1"; return 0; fi
  if claim_mark "$2" "$3" "$4"; then
    printf 'claim\t%s\tclaimed\t' "$1"
    tail -c 32768 "$2/train.log" 2>/dev/null | base64 2>/dev/null | tr -d '\n'
    printf '\n'
  else
    printf 'claim\t%s\ttaken\n' "$1"
  fi
}
rt_notify() {
  [ -r notify.json ] && [ -r notify.pyz ] || return 0
  case " $rt_non " in *" $1 "*) ;; *) return 0;; esac
  # A Python that cannot run notify.pyz (missing, or older than its syntax: 3.8) would
  # lose the message once claimed: leave it to the clients then.
  (unset RTRAIN_RUN; "$rt_np" notify.pyz check) >/dev/null 2>&1 < /dev/null || return 0
  claim_mark . "$1" || return 0
  if [ "${rt_nfg-}" = 1 ] && [ "$1" != stalled ]; then
    (unset RTRAIN_RUN; "$rt_np" notify.pyz "$1" "$2" "$rt_nw" >> notify.log 2>&1 < /dev/null)
    return 0
  fi
  if command -v setsid >/dev/null 2>&1; then rn_s=setsid; else rn_s=; fi
  (
    unset RTRAIN_RUN
    $rn_s "$rt_np" notify.pyz "$1" "$2" ${rt_nw:+"$rt_nw"} >> notify.log 2>&1 < /dev/null &
  )
}
rt_notify_end() {
  rn_q=0; rn_l=; [ -r stop_requested ] && read -r rn_l < stop_requested
  [ -n "$rn_l" ] && rn_q=1
  rn_x=0; [ -e stopped ] && rn_x=1
  state_word 1 "$rn_x" "$rn_q" "$1" 0 0 0 0 1
  case $sw in failed*) rn_e=failed;; *) rn_e=$sw;; esac
  rt_notify "$rn_e" "$1"
}
rt_sa=900
rt_wi=60
rt_on=restart
rt_gi=600
rt_noted() {
  [ -s "$rt_ad/stall_note" ] || return 0
  if [ -n "$(tail -c 1 train.log)" ]; then echo >> train.log; fi
  cat "$rt_ad/stall_note" >> train.log
  rm -f "$rt_ad/stall_note"
}
rt_reap() {
  [ -n "${rt_wd-}" ] || return 0
  # Only while it is still this shell's child (its parent is $$): a pid the shell reaped
  # already may be another process's by now, never signalled.
  rr_line=; read -r rr_line 2>/dev/null < "$proc/$rt_wd/stat"
  # shellcheck disable=SC2086  # stat's fields, split on purpose (the name is cut off)
  set -- ${rr_line##*) }
  if [ "${2-}" = $$ ]; then kill -TERM "$rt_wd" 2>/dev/null; wait "$rt_wd"; fi
  rt_wd=
}
rt_watch() {
  rt_reap
  rm -f "$rt_ad/stalled" "$rt_ad/stall_kill" "$rt_ad/stall_note" "$rt_ad/gpus_idle"
  (
    trap 'exit 0' TERM
    read -r wd_self _ < /proc/self/stat || wd_self=none
    own_pgrp=none sh_pgrp=none  # the run's group is the wrapper's: nothing to spare
    wd_gpus=${CUDA_VISIBLE_DEVICES-} wd_idle0=''
    case $wd_gpus in *[!0-9,]*) wd_gpus='';; esac
    if command -v timeout >/dev/null 2>&1; then wd_t="timeout 10"; else wd_t=''; fi
    while sleep "$rt_wi"; do
      wd_now=$(date +%s) || continue
      if [ -n "$wd_gpus" ]; then
        # 0: every GPU of the run under 5% busy; 1: one is busy; ?: no answer (no verdict).
        wd_busy=$($wd_t nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total \
            --format=csv,noheader,nounits 2>/dev/null | awk -F', *' -v ids=",$wd_gpus," '
          index(ids, "," $1 ",") { n++; if ($3 + 0 >= 5) b = 1 }
          END { print (n ? b + 0 : "?") }')
        if [ "$wd_busy" = 0 ]; then
          [ -n "$wd_idle0" ] || wd_idle0=$wd_now
          if [ $((wd_now - wd_idle0)) -ge "$rt_gi" ]; then
            echo $((wd_now - wd_idle0)) > "$rt_ad/gpus_idle.tmp" && mv -f "$rt_ad/gpus_idle.tmp" "$rt_ad/gpus_idle"
          fi
        else
          wd_idle0=''; rm -f "$rt_ad/gpus_idle"
        fi
      fi
      wd_mt=$(stat -c %Y train.log 2>/dev/null || stat -f %m train.log 2>/dev/null) || continue
      wd_age=$((wd_now - wd_mt))
      if [ "$wd_age" -lt "$rt_sa" ]; then rm -f "$rt_ad/stalled"; continue; fi
      [ -e "$rt_ad/stalled" ] || [ -z "${rt_non-}" ] || rt_notify stalled "$wd_age"  # notify_send.sh
      echo "$wd_age" > "$rt_ad/stalled.tmp" && mv -f "$rt_ad/stalled.tmp" "$rt_ad/stalled"
      [ "$rt_on" = warn ] && continue
      wd_why="stalled: no output for $((wd_age / 60))m"  # as probes.stall_reason words it
      [ "$wd_age" -ge 60 ] || wd_why="stalled: no output for ${wd_age}s"
      if [ "$rt_on" = stop ]; then
        [ -s stop_requested ] || echo stall > stop_requested
        printf 'rtrain-tui: %s; stopping the run (--on-stall stop)\n' "$wd_why" > "$rt_ad/stall_note"
      else
        echo "$wd_why" > "$rt_ad/stall_kill"
        printf 'rtrain-tui: %s; restarting it (--on-stall restart)\n' "$wd_why" > "$rt_ad/stall_note"
      fi
      # What end_rest ends, but for this watchdog and its own sleep (the wrapper, $$,
      # is spared by live_of): the trainer and all its processes.
      wd_end() {
        live_of "$(marked_pids "$RTRAIN_RUN")"; wd_left=
        for wd_p in $live; do [ "$wd_p" = "$wd_self" ] || wd_left="$wd_left $wd_p"; done
      }
      wd_end
      # shellcheck disable=SC2086  # a list of pids
      [ -n "$wd_left" ] && kill -TERM $wd_left 2>/dev/null
      wd_i=0
      while [ -n "$wd_left" ] && [ $wd_i -lt $((${RT_GRACE:-10} * 5)) ]; do
        sleep 0.2; wd_i=$((wd_i + 1)); wd_end
      done
      # shellcheck disable=SC2086  # a list of pids
      [ -n "$wd_left" ] && kill -KILL $wd_left 2>/dev/null
      break
    done
  ) &
  rt_wd=$!
}
rt_watch
{ ~/venv/bin/python train.py --config config.yaml
} > train.log 2>&1 < /dev/null
rc=$?
cd "$rt_dir" || exit "$rc"
rt_noted
rt_a=1
rt_last=3
rt_cfg=0
rt_base=30
rt_py=~/venv/bin/python
while [ "$rc" != 0 ] && [ -z "$rt_signalled" ] && [ ! -e stop_requested ]; do
  end_rest
  rt_go=0 rt_why='' rt_rec='' rt_ck='' rt_sep='' rt_wait=0 rt_end=''
  rt_mk="rtck-$$-$(date +%s)-$rc"  # ends each trainer_state.json block (checkpoints.sh)
  rt_out=$( (rd=.; mk=$rt_mk
cd "$rd" 2>/dev/null || { echo nodir; exit 0; }
for d in checkpoint-* ./*/checkpoint-* ./*/*/checkpoint-*; do
  d=${d#./}
  [ -d "$d" ] || continue
  case $d in *[!A-Za-z0-9._/-]*|.*|*/.*) continue;; esac
  case ${d##*/} in checkpoint-|checkpoint-*[!0-9]*) continue;; esac
  printf 'ck\t%s\n' "$d"
  for f in "$d"/*; do
    [ -f "$f" ] || continue
    n=${f##*/}
    case $n in *[!A-Za-z0-9._-]*) continue;; esac
    if [ -s "$f" ]; then printf 'f\t%s\t1\n' "$n"; else printf 'f\t%s\t0\n' "$n"; fi
  done
  t=$d/trainer_state.json
  [ -f "$t" ] || continue
  z=$(wc -c < "$t" 2>/dev/null) || z=0
  z=$((z + 0))
  if [ "$z" -le 65536 ]; then
    printf 'ts\t%s\twhole\n' "$z"
    cat -- "$t" 2>/dev/null
  else
    printf 'ts\t%s\thead\n' "$z"
    dd if="$t" bs=16384 count=1 2>/dev/null
    printf '\n%s\n' "$mk"
    tail -c 64 -- "$t" 2>/dev/null
  fi
  printf '\n%s\n' "$mk"
done
  ) 2>/dev/null | "$rt_py" retry.pyz "$rc" "$rt_a" "$rt_last" "$rt_base" "$rt_mk" 2>>train.log)
  eval "$rt_out"
  if [ "$rt_go" != 1 ]; then
    [ -n "$rt_why" ] || rt_why="retry could not decide (retry.pyz said nothing: see train.log)"
    printf '%s\n' "$rt_why" > "$rt_ad/retry_gave_up.tmp" && mv -f "$rt_ad/retry_gave_up.tmp" "$rt_ad/retry_gave_up"
    break
  fi
  rt_a=$((rt_a + 1))
  rt_nd=$rt_ad
  if [ "$rt_ad" != . ]; then
    # The next attempt, current from its wait on, its why there before it is current.
    rt_nd=.rtrain/attempts/$rt_a
    mkdir -p "$rt_nd"
  fi
  printf '%s\n' "$rt_why" > "$rt_nd/retry_wait.tmp" && mv -f "$rt_nd/retry_wait.tmp" "$rt_nd/retry_wait"
  if [ "$rt_ad" != . ]; then
    attempt_begin . "$rt_a"
    echo "$rc" > "$rt_ad/status"
  else  # an older run dir's ended attempts are filed in attempts/N
    mkdir -p "attempts/$((rt_a - 1))" && echo "$rc" > "attempts/$((rt_a - 1))/status"
  fi
  rt_ad=$rt_nd
  printf '%s\n' "$rt_rec" >> "$rt_aj"
  sleep "$rt_wait" &
  wait $!
  rm -f "$rt_ad/retry_wait"
  if [ -n "$rt_signalled" ] || [ -e stop_requested ]; then rc=143; break; fi
  if [ "$rt_cfg" = 1 ] && [ -f config.yaml ]; then
    awk '!/^resume_from_checkpoint[ \t]*:/' config.yaml > config.yaml.tmp &&
      { [ -z "$rt_ck" ] || printf "resume_from_checkpoint: '%s'\n" "$rt_ck"; } >> config.yaml.tmp &&
      mv -f config.yaml.tmp config.yaml
  fi
  if [ -s train.log ] && [ -n "$(tail -c 1 train.log)" ]; then echo >> train.log; fi
  printf '%s\n' "$rt_sep" >> train.log
  rt_st=$(date +%s)
  printf '{"attempt": %s, "started": %s, "checkpoint": "%s", "retry": true}\n' \
    "$rt_a" "$rt_st" "$rt_ck" >> "$rt_aj"
  rt_waited=$(( ${rt_waited:-0} + rt_st - ${rt_end:-$rt_st} ))
  echo "$rt_a $rt_st $rt_waited" > running_since.tmp && mv -f running_since.tmp running_since
rt_watch
  if [ -n "$rt_ck" ]; then
    RTRAIN_RESUME_FROM=$rt_ck; export RTRAIN_RESUME_FROM
{ ~/venv/bin/python train.py --config config.yaml --resume_from_checkpoint "$rt_ck"
} >> train.log 2>&1 < /dev/null
  else
    unset RTRAIN_RESUME_FROM
{ ~/venv/bin/python train.py --config config.yaml
} >> train.log 2>&1 < /dev/null
  fi
  rc=$?
  cd "$rt_dir" || exit "$rc"
rt_noted
done
end_rest
echo $rc > status.tmp && mv status.tmp status
rt_notify_end "$rc"
