## The state rule's shell copy (core/runs/state_rule.py, `run_state`): the host's own
## word for a run, for the wrapper's end (notify_send.sh). Proved equal to the Python on
## generated facts by tests/unit/test_state_rule_agrees.py: change both together.
## `state_word EXISTS STOPPED STOP_REQUESTED CODE QUEUED ALIVE UNWRITTEN SUBMITTING LAUNCHED`
## (flags 1 or 0; CODE the recorded exit code as `$?` writes it, empty when none) sets
## `sw` to the status word and `sw_why` to the rule's reason ('' but for a submission).
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
