## Notice a stall: `rt_watch` starts a watchdog beside the attempt about to run. Every
## $rt_wi seconds (60) it reads train.log's age by the host's clock; from $rt_sa seconds
## on it writes the age to `stalled` (the probe reads it: no round trip of its own) and
## removes the file once the log grows again. With $rt_on `stop` or `restart` it then
## ends the attempt as the wrapper's own end does (end_rest: TERM, a grace, KILL; not the
## wrapper, not itself): `stop` marks the run stopped as our stop does (`stop_requested`),
## `restart` leaves `stall_kill` holding why, for the retry loop (retry.sh) to resume it
## from its newest complete checkpoint, counted against --retries. A stop or the
## wrapper's end (TERM to it and its `sleep`) ends it; its trap waits for that `sleep`
## first, so no child of it is left a zombie under a PID 1 that never reaps (many
## containers'). `rt_reap` ends the last watchdog and reaps it (a job's batch shell, at
## its end: a zombie left in the job keeps Slurm from ending it). It also samples the
## run's GPUs (CUDA_VISIBLE_DEVICES) at each look: once all stayed under 5% busy for
## $rt_gi seconds (600) it keeps how long in `gpus_idle` (a warning only: it stops
## nothing). Its files are the attempt's own, in $rt_ad (attempt.sh): a stall of one
## attempt never explains the next. Needs liveness.sh, end_rest.sh, $rt_sa, $rt_wi,
## $rt_on, $rt_gi, $rt_ad.
## `rt_noted`, once the attempt is over: the watchdog's note goes to the log then, not
## while the trainer's own descriptor (opened without O_APPEND) may still write over it.
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
