## Print how many live (non-zombie) members the run has. Needs liveness.sh, $rd, $at
## (the train.token of the attempt a stop signalled; empty: the one in the run dir).
own_groups
read_file "$rd/train.token"
if [ -n "$at" ] && [ "$rf" != "$at" ]; then
  # A resume claimed a new attempt since: only what is left of attempt $at counts.
  live_of "$(marked_pids "$at")"; members=$live
else
  run_members "$rd"
fi
# shellcheck disable=SC2086  # counted as words
set -- $members; echo "alive=$#"
