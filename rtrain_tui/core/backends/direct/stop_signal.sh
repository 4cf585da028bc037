## Send $sig to every member of the run, unless its pid file names our own group; the
## first sending records `stop_requested` (holding this stop's nonce, $tok). Needs
## liveness.sh, $rd, $tok, $sig.
own_groups
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
