## A job's submission under way: `sbatch` has been started for the run and has not
## answered yet (core/backends/slurm/submit.sh). Until it answers, the run is `starting`
## (the state rule, core/runs/state_rule.py), never `lost`, and no resume may supersede
## its attempt (resume.sh): a second job in one run dir would train beside the first.
## The marker `submitting` names the sbatch process: its pid and its start time (a pid
## recycled since is not it). Without /proc only the pid can be checked.
## `su_start PID` sets `su_st` to the process's start time and `su_z` to its state
## ('' when not known). A zombie is dead: many hosts' PID 1 never reaps orphans.
su_start() {
  su_st='' su_z=''
  read -r su_l 2>/dev/null < "/proc/$1/stat" || return 0
  su_l=${su_l##*) }
  # shellcheck disable=SC2086  # stat's fields, split on purpose (the name is cut off)
  set -- $su_l
  su_z=$1 su_st=${20}
}
## `submit_mark PID`, in the run dir: PID is the sbatch just started.
submit_mark() {
  su_start "$1"
  printf '%s %s\n' "$1" "$su_st" > submitting.tmp && mv -f submitting.tmp submitting
}
## `submit_under_way RUNDIR`: true while the sbatch its marker names lives and nothing
## of its answer (a job id, an error, an unclear answer) is recorded.
submit_under_way() {
  [ -e "$1/submitting" ] || return 1
  { [ -s "$1/slurm_job_id" ] || [ -s "$1/submit_error" ] || [ -s "$1/submit_unknown" ]; } && return 1
  su_p='' su_w=''
  read -r su_p su_w 2>/dev/null < "$1/submitting"
  case $su_p in ''|*[!0-9]*|0|1) return 1;; esac
  kill -0 "$su_p" 2>/dev/null || return 1
  su_start "$su_p"
  case $su_z in Z*|X*|x*) return 1;; esac
  [ "$su_st" = "$su_w" ]
}
