#!/bin/sh
# Written by rtrain-tui: the detached wrapper of one training run.
#@ liveness
#@ end_rest
## This attempt's own directory and the run's attempts.jsonl (attempt.sh): the claim that
## made the attempt (make_run_dir.sh, resume.sh) made it the current one. Its retry wait
## and give-up, its stall watchdog's and its queue's files go there, never at the top.
attempt_dir .
# shellcheck disable=SC2034  # rt_aj: read by the queue's and the retry loop's lines, when there are any
rt_ad=$ad rt_aj=$aj
mkdir -p "$rt_ad"
if proc_fields $$ && [ -n "$start" ]; then
  boot_id
  printf '%s %s\n' "$start" "$bi" > train.ident.tmp && mv train.ident.tmp train.ident
fi
echo $$ > train.pid.tmp && mv train.pid.tmp train.pid
trap 'rt_signalled=1' TERM INT HUP
#@ unbuffered
#@ exports
## The box's GPU state (its lock, records and queue: gpu_box.sh).
#@ gpu_box
## A queued run (`start --queue`) waits on the host for its GPUs here; stopped while it
## waits, it ends with the code of a TERM and its trainer never runs.
#@ queue
# The GPUs this run has, for the host's queue and every client (gpu_rule.sh), in the
# box's records; a start that chose them recorded them already (and a queued run just did).
case ${CUDA_VISIBLE_DEVICES-x} in
  ''|*[!0-9,]*) ;;
  *) [ -e gpus ] || { echo "$CUDA_VISIBLE_DEVICES" > gpus.tmp && mv gpus.tmp gpus && box_record "$PWD"; };;
esac
## A template's `cd` (it runs in this shell, in braces) must not move where status lands.
rt_dir=$PWD
## The host tells the run's end and stalls itself (notify_send.sh), when the client asked.
#@ notify
#@ watch
#@ trainer
rc=$?
cd "$rt_dir" || exit "$rc"
#@ watched
#@ retry
end_rest
echo $rc > status.tmp && mv status.tmp status
#@ notify_end
