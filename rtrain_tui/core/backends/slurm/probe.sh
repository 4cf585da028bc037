## The refresh probe of a login node: every run's files (`probe I RUNDIR NEED_END`, one
## line each, in the `#@ runs` slot), then one Slurm query for all their jobs. With
## NEED_END=1 a run with a job or an exit code also reports when its `status` (else its
## log) was last written, `I<TAB>ended=EPOCH`, all at once by `mt_flush` (mtimes.sh):
## the client keeps it only for a run that Slurm's answer shows ended. Why an attempt
## waits, gave up or stalled is read from its own directory (attempt.sh's `ad`). Needs
## submitting.sh.
read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
ids=
probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/slurm_job_id"; job=$rf
  case $job in ''|*[!0-9_]*) job=;; *) ids="$ids${ids:+,}$job";; esac
  read_file "$rd/status"; code=$rf
  read_file "$rd/status_attempt"; attempt=$rf
  ## The job's retry loop (core/host/retry.sh): waiting to try again says why; a failed
  ## run that gave up says why it did not retry.
  attempt_dir "$rd"
  rw=; if [ -z "$code" ]; then read_file "$ad/retry_wait"; rw=$rf
  elif [ "$code" != 0 ]; then read_file "$ad/retry_gave_up"; rw=$rf; fi
  ## Its stall watchdog (core/host/watch.sh) keeps the log's age in `stalled`, and how
  ## long the job's GPUs idled in `gpus_idle`: read while the job runs unstopped, or when
  ## the watchdog stopped it (`--on-stall stop`: `stop_requested` says `stall`), as its why.
  read_file "$rd/stop_requested"; stop=0; [ -n "$rf" ] && stop=1; stop_by=$rf
  st=; gi=; if [ "$stop_by" = stall ] || { [ -z "$code" ] && [ "$stop" = 0 ]; }; then
    read_file "$ad/stalled"; st=$rf; read_file "$ad/gpus_idle"; gi=$rf; fi
  stopped=0; [ -e "$rd/stopped" ] && stopped=1
  launched=0; [ -e "$rd/launch.lock" ] && launched=1
  unknown=0; [ -s "$rd/submit_unknown" ] && unknown=1
  ## Its sbatch still running (submitting.sh): `starting`, never `lost`.
  sub=0; if [ -z "$job" ] && [ $launched = 1 ] && submit_under_way "$rd"; then sub=1; fi
  if [ "$3" = 1 ] && [ -n "$job$code" ]; then
    ef="$rd/status"; [ -e "$ef" ] || ef="$rd/train.log"
    [ -e "$ef" ] && mt_add "$1${tab}ended=" "$ef"
  fi
  read_file "$rd/running_since"  # `ATTEMPT EPOCH`: when the job left Slurm's queue
  [ -n "$rf" ] && printf '%s\trunning_since=%s\n' "$1" "$rf"
  printf '%s\texists=1\tjob=%s\tcode=%s\tattempt=%s\tstop=%s\tstopped=%s\tlaunched=%s\tunknown=%s\tsubmitting=%s\tretry=%s\tstalled=%s\tgpus_idle=%s\n' \
    "$1" "$job" "$code" "$attempt" "$stop" "$stopped" "$launched" "$unknown" "$sub" "$rw" "$st" "$gi"
}
#@ runs
mt_flush
[ -n "$ids" ] || exit 0
sq=$(squeue -h -t all -j "$ids" -O 'JobID:|,State:|,Reason:|,exit_code:|,RestartCnt:|' 2>/dev/null)
printf '%s\n' "$sq" | sed -n 's/^\([0-9]\)/J	\1/p'
case $sq in *'|PENDING|'*)
  # Our waiting jobs' places in their partition's queue, in Slurm's priority order
  # (every user's pending jobs; bounded): `Q<TAB>ID|PLACE`.
  squeue -h -t PD --sort=-p,i -O 'JobID:|,Partition:|' 2>/dev/null | head -n 20000 |
    awk -F'|' -v ids=",$ids," '{ n[$2]++ } index(ids, "," $1 ",") { print "Q\t" $1 "|" n[$2] }'
esac
oldifs=$IFS; IFS=,
for id in $ids; do
  case "
$sq" in *"
$id|"*) continue;; esac
  out=$(scontrol -o show job "$id" 2>/dev/null) && printf 'C\t%s\n' "$out"
  missing="$missing${missing:+,}$id"
done
IFS=$oldifs
if [ -n "$missing" ]; then
  sacct -n -P -X -j "$missing" -o JobID,State,ExitCode 2>/dev/null | sed 's/^/A	/'
fi
