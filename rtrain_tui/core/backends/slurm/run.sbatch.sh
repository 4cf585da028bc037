#!/bin/sh
#@ sbatch
# Written by rtrain-tui: the batch script of one training run. Slurm runs it on the
# first node of the job, in the run directory; its output is train.log.
# shellcheck disable=SC2317  # liveness.sh is a library: helpers this job never calls are not dead code
## `#@ sbatch` are the #SBATCH lines (before any command: sbatch reads no further);
## `#@ token` sets RTRAIN_RUN; `#@ launch` starts the trainer in the background
## (launch_one.sh or launch_nodes.sh) and `rt_trained` waits for it. The batch shell
## forwards TERM/INT/HUP to it (a trap, not `exec`, so the shell survives to write the
## trainer's exit code into `status`, as the direct wrapper does). `#@ unattended` is
## core/host's liveness.sh and end_rest.sh when the job retries or watches for a stall;
## `#@ watch`, `#@ watched` and `#@ retry` are the same watchdog and retry loop a box's
## run.sh has (core/host/watch.sh, retry.sh), so a failed attempt is tried again inside
## this job, on the GPUs it holds, and a stall is noticed (and acted on) on the batch
## node; `#@ end_rest` then ends what is left (the watchdog, a trainer's stray children).
## `#@ notify` and `#@ notify_end`: the job tells its end itself, as a box's wrapper does
## (core/host/notify_send.sh, [notify] on_host).
#@ token
export RTRAIN_RUN
## `#@ attempt` is core/host/attempt.sh: where this attempt's own files go.
#@ attempt
attempt_dir .; rt_aj=$aj
## A requeued job (preemption, `scontrol requeue`, a node failure) runs this script again:
## it goes on as the attempt it was on, the host's current one (an older run dir's: the
## highest attempts.jsonl records; its retry loop's too), so neither that number nor what
## is left of --retries starts over.
## Its earlier runs' seconds (`ran_s`, written as each run of this script ends) are the
## attempt's too: billed, and the wait in the queue between them not (core/runs/cost_rule.py).
rt_ran=0 rt_st=''
if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then
  rt_now=$an
  if [ -z "$rt_now" ] && [ -s "$rt_aj" ]; then
    rt_now=$(sed -n 's/^{"attempt": \([0-9][0-9]*\)[,}].*/\1/p' "$rt_aj" | sort -n | tail -n 1)
  fi
  [ -z "$rt_now" ] || [ "$rt_now" -le "$rt_attempt" ] || rt_attempt=$rt_now
  rt_was=$(cat ran_s 2>/dev/null)
  [ "${rt_was%% *}" != "$rt_attempt" ] || rt_ran=${rt_was#* }
  case "$rt_ran" in ''|*[!0-9]*) rt_ran=0 ;; esac
fi
[ "${SLURM_RESTART_COUNT:-0}" != 0 ] || rm -f ran_s
## This attempt's own directory (an older run dir's: its top level).
rt_ad=.; [ -z "$an" ] || { rt_ad=.rtrain/attempts/$rt_attempt; mkdir -p "$rt_ad"; }
echo "$SLURM_JOB_ID" > slurm_job_id.tmp && mv slurm_job_id.tmp slurm_job_id
## When the job left Slurm's queue: the run's cost counts from here (core/runs/cost.py).
rt_at=$(date +%s)
if [ "$rt_ran" = 0 ]; then
  printf '{"attempt": %s, "launched": %s}\n' "$rt_attempt" "$rt_at" >> "$rt_aj"
else
  printf '{"attempt": %s, "launched": %s, "ran": %s}\n' "$rt_attempt" "$rt_at" "$rt_ran" >> "$rt_aj"
fi
## The same, one line the refresh probe reads: the index keeps it for `runs` and `costs`
## (a requeued job's earlier seconds as an earlier start: the index bills the same total).
echo "$rt_attempt $((rt_at - rt_ran))" > running_since.tmp && mv running_since.tmp running_since
# What this attempt's job said of its retries or a stall before Slurm requeued it is
# over: it begins again.
rm -f "$rt_ad/retry_wait" "$rt_ad/retry_gave_up" "$rt_ad/stalled" "$rt_ad/gpus_idle"
#@ unbuffered
#@ exports
#@ unattended
child=
trap 'rt_signalled=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' TERM INT HUP
# Wait for the trainer just started in the background: its exit code in $rc and as `$?`.
rt_trained() {
  child=$!
  wait "$child"; rc=$?
  # A trapped signal interrupts `wait` (rc > 128) while the trainer still runs: wait again.
  while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
  child=
  return "$rc"
}
#@ notify
#@ watch
#@ launch
rt_trained
#@ watched
#@ retry
#@ end_rest
## What this run of the script ran of its attempt (the retry loop's latest, from its start),
## for a requeue of the job to bill (above).
rt_end=$(date +%s)
if [ -n "$rt_st" ]; then rt_was="$(cut -d ' ' -f 1 running_since) $((rt_end - rt_st))"; else rt_was="$rt_attempt $((rt_ran + rt_end - rt_at))"; fi
echo "$rt_was" > ran_s.tmp && mv ran_s.tmp ran_s
echo $rc > status.tmp && mv status.tmp status
# Which attempt wrote `status` (Slurm runs this script again for a requeued job): an exit
# code counts only while the job is still on that attempt. Written second, so a probe
# between the two never pairs an old code with the new attempt.
echo "${SLURM_RESTART_COUNT:-0}" > status_attempt.tmp && mv status_attempt.tmp status_attempt
#@ notify_end
exit $rc
