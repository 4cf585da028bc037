## The wrapper's own end: once the trainer has exited (any way), what is left of the run
## (its dataloader workers, torchrun workers in sessions of their own) gets SIGTERM,
## RT_GRACE seconds, then SIGKILL, before the exit code is recorded, so nothing holds GPU
## memory under a run that reads as ended. Needs liveness.sh.
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
