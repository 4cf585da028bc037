## Tell the run's end or stall from its own host (core/notify/host_send.py), with every
## laptop closed. `rt_notify EVENT ARG` (ARG: the exit code, or the log's age for
## `stalled`) does nothing unless the client wrote notify.json (the webhook URLs, mode
## 0600) and EVENT is one the user wants ($rt_non); else it claims the transition's
## marker as every client does (claim_notify.sh: one mkdir, so the message goes once,
## whoever is first) and starts notify.pyz with the run's Python ($rt_np), detached from
## the run: in a session of its own, without the run's marker, so a stop never waits for
## it nor kills it, and a service that hangs holds nothing up (each POST is bounded). It
## prints nothing anywhere but notify.log: never a URL, never into train.log.
## With $rt_nfg = 1 (a Slurm job, whose processes the scheduler ends with it, cgroup and
## all) it sends the end in the foreground instead, all its URLs within $rt_nw seconds
## together (notify.pyz's WITHIN), so a hanging service holds the job and its GPUs no
## longer. A stall is still sent detached (within $rt_nw too): from the watchdog in the
## foreground it held `--on-stall stop/restart` until the send was done.
## `rt_notify_end` is the end's: after the exit code is written, with the word the state
## rule gives the run's facts then (state_rule.sh: a stop of ours is `stopped` whatever
## the trainer exited with; else completed or failed). The word's event is sent, or
## nothing when the user does not want it (`stopped` not in `on`).
## Needs state_rule.sh, claim_notify.sh, $rt_np, $rt_non, $rt_nw (empty: no limit).
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
