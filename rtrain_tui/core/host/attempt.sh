## Where a run's attempts keep their files: the one shell place that knows it (sourced by
## every script that reads or writes an attempt's files; core/runs/attempt_layout.py is
## the same for Python, docs/on-the-host.md for people).
## A run dir made by this rtrain-tui has `.rtrain/`, our bookkeeping kept apart from what
## the trainer writes in its working directory (a trainer's own attempts.jsonl or
## launch.json is never ours): `.rtrain/attempts.jsonl`, `.rtrain/launch.json`,
## `.rtrain/attempt` (the current attempt's number) and `.rtrain/attempts/N/`, attempt N's
## own files from its start (its retry wait and give-up, its stall watchdog's files, its
## queue's give-up; an ended attempt's exit code and stop marks too), so nothing of
## attempt N can explain attempt N+1. A run dir made before (no `.rtrain/`) has
## everything at its top level and its ended attempts' files in attempts/N/.
## `attempt_dir RD`: sets `ad` to the current attempt's own directory (RD in an older run
## dir), `aj` to the run's attempts.jsonl and `an` to the attempt's number (empty in an
## older run dir: attempt_no counts it). No fork: the probe runs it for every run.
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
## `attempt_no RD`: sets `an` to the run's current attempt, either layout (an older run
## dir's: one more than its attempts/N/), with `ad` and `aj` as attempt_dir.
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_no() {
  attempt_dir "$1"
  if [ -z "$an" ]; then
    an=1
    for an_d in "$1"/attempts/[0-9]*; do [ -d "$an_d" ] && an=$((an + 1)); done
  fi
}
## `attempt_begin RD N`: attempt N's own directory, made the current attempt (the number
## written whole, by a rename: a reader sees the attempt before or this one). Fails,
## saying why on stderr, when it cannot be made.
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_begin() {
  ab_d=$1/.rtrain
  mkdir -p "$ab_d/attempts/$2" &&
    printf '%s\n' "$2" > "$ab_d/attempt.tmp" && mv -f "$ab_d/attempt.tmp" "$ab_d/attempt"
}
## The current attempt's files that stay at the run dir's top level, where the run-dir
## contract (train.pid, status: praisonai-train and older rtrain-tui read them) and the
## probes, stop and launch scripts look; a resume files them in the ended attempt's own
## directory when it claims the next (resume.sh). Everything else an attempt writes of
## its own is in its directory from its start.
# shellcheck disable=SC2034  # read by the scripts that source this file
attempt_top='status status.tmp status_attempt stop_requested stopped launch.lock train.pid
  train.ident slurm_job_id submit_unknown submit_error submit_message gpus queued'
