## Retry by itself (`start --retries N`): after attempt $rt_a failed, not by our stop,
## try again, up to attempt $rt_last. Whether, when and from which checkpoint is decided
## by retry.pyz (core/logs/retry_rule.py, run by the trainer's Python) from the log's
## tail and host/checkpoints.sh's listing: the same rules as `why_it_ended` and a resume.
## While it waits the run reads `queued` (retry_wait holds the reason); a stop during the
## wait (our TERM reaches this shell's trap and the sleep) ends it with no further
## attempt. Each attempt is one of its own (attempt.sh): the next one's directory is made
## the current attempt as its wait begins (`retry_wait` in it), the ended one's exit code
## goes to its own directory's `status` and its record to attempts.jsonl; only the last
## attempt's code is ever written to the top-level `status`, and a give-up's why
## (`retry_gave_up`) is in the attempt that gave up: no later attempt reads it.
## Needs $rc, $rt_a, $rt_last, $rt_py, $rt_cfg, $rt_base (seconds: attempt K waits K × it),
## $rt_ad (this attempt's own directory), $rt_aj (attempts.jsonl), attempt.sh.
while [ "$rc" != 0 ] && [ -z "$rt_signalled" ] && [ ! -e stop_requested ]; do
  end_rest
  rt_go=0 rt_why='' rt_rec='' rt_ck='' rt_sep='' rt_wait=0 rt_end=''
  rt_mk="rtck-$$-$(date +%s)-$rc"  # ends each trainer_state.json block (checkpoints.sh)
  rt_out=$( (rd=.; mk=$rt_mk
#@ checkpoints
  ) 2>/dev/null | "$rt_py" retry.pyz "$rc" "$rt_a" "$rt_last" "$rt_base" "$rt_mk" 2>>train.log)
  eval "$rt_out"
  if [ "$rt_go" != 1 ]; then
    [ -n "$rt_why" ] || rt_why="retry could not decide (retry.pyz said nothing: see train.log)"
    printf '%s\n' "$rt_why" > "$rt_ad/retry_gave_up.tmp" && mv -f "$rt_ad/retry_gave_up.tmp" "$rt_ad/retry_gave_up"
    break
  fi
  rt_a=$((rt_a + 1))
  rt_nd=$rt_ad
  if [ "$rt_ad" != . ]; then
    # The next attempt, current from its wait on, its why there before it is current.
    rt_nd=.rtrain/attempts/$rt_a
    mkdir -p "$rt_nd"
  fi
  printf '%s\n' "$rt_why" > "$rt_nd/retry_wait.tmp" && mv -f "$rt_nd/retry_wait.tmp" "$rt_nd/retry_wait"
  if [ "$rt_ad" != . ]; then
    attempt_begin . "$rt_a"
    echo "$rc" > "$rt_ad/status"
  else  # an older run dir's ended attempts are filed in attempts/N
    mkdir -p "attempts/$((rt_a - 1))" && echo "$rc" > "attempts/$((rt_a - 1))/status"
  fi
  rt_ad=$rt_nd
  printf '%s\n' "$rt_rec" >> "$rt_aj"
  sleep "$rt_wait" &
  wait $!
  rm -f "$rt_ad/retry_wait"
  if [ -n "$rt_signalled" ] || [ -e stop_requested ]; then rc=143; break; fi
  if [ "$rt_cfg" = 1 ] && [ -f config.yaml ]; then
    awk '!/^resume_from_checkpoint[ \t]*:/' config.yaml > config.yaml.tmp &&
      { [ -z "$rt_ck" ] || printf "resume_from_checkpoint: '%s'\n" "$rt_ck"; } >> config.yaml.tmp &&
      mv -f config.yaml.tmp config.yaml
  fi
  if [ -s train.log ] && [ -n "$(tail -c 1 train.log)" ]; then echo >> train.log; fi
  printf '%s\n' "$rt_sep" >> train.log
  rt_st=$(date +%s)
  printf '{"attempt": %s, "started": %s, "checkpoint": "%s", "retry": true}\n' \
    "$rt_a" "$rt_st" "$rt_ck" >> "$rt_aj"
  ## The refresh probe's line for it too (`ATTEMPT EPOCH WAITED`): with the seconds this
  ## loop has waited between attempts, the index leaves them out of `runs` and `costs`.
  rt_waited=$(( ${rt_waited:-0} + rt_st - ${rt_end:-$rt_st} ))
  echo "$rt_a $rt_st $rt_waited" > running_since.tmp && mv -f running_since.tmp running_since
#@ rewatch
  if [ -n "$rt_ck" ]; then
    RTRAIN_RESUME_FROM=$rt_ck; export RTRAIN_RESUME_FROM
#@ resumed
  else
    unset RTRAIN_RESUME_FROM
#@ fresh
  fi
  rc=$?
  cd "$rt_dir" || exit "$rc"
#@ watched
done
