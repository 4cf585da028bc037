## Send $sig to every member of the run, unless its pid file names our own group; the
## first sending records `stop_requested` (holding this stop's nonce, $tok) and says
## which attempt it signalled (`run=` its train.token). A later sending for attempt $at
## after a resume claimed a new one signals only what is left of $at: the new attempt
## was not asked to stop. Needs liveness.sh, $rd, $tok, $sig, $at (may be empty).
own_groups
read_file "$rd/train.token"; echo "run=$rf"
if [ -n "$at" ] && [ "$rf" != "$at" ]; then
  live_of "$(marked_pids "$at")"
  [ -n "$live" ] || { echo result=not_running; exit 0; }
  # shellcheck disable=SC2086  # a list of pids
  kill -"$sig" $live 2>/dev/null
  # shellcheck disable=SC2086  # counted as words
  set -- $live; echo result=signalled; echo "count=$#"; exit 0
fi
read_file "$rd/train.pid"; pid=$rf
if [ -n "$pid" ] && proc_fields "$pid" && { [ "$pgrp" = "$own_pgrp" ] || [ "$pgrp" = "$sh_pgrp" ]; }; then
  echo "result=refused"; echo "group=$pgrp"; exit 0
fi
run_members "$rd"
if [ -z "$members" ]; then
  read_file "$rd/stop_requested"
  if [ "$rf" = "$tok" ]; then echo result=signalled; echo count=0; else echo result=not_running; fi
  exit 0
fi
[ -e "$rd/stop_requested" ] || echo "$tok" > "$rd/stop_requested"
# shellcheck disable=SC2086  # a list of pids
kill -"$sig" $members 2>/dev/null
# shellcheck disable=SC2086  # counted as words
set -- $members; echo result=signalled; echo "count=$#"
