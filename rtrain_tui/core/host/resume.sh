## Make a run directory whose run ended ready for attempt $n, once: the files that said
## how attempt $p ended (its exit code, stop marks, pid, identity, launch lock, job id,
## the GPUs it was given)
## move to attempts/$p/, so nothing of it can be read as the new attempt's; train.token
## gets the new attempt's token; config.yaml's top-level `resume_from_checkpoint` (its
## line and the indented lines its value goes on over) is replaced (or removed, on a
## restart) when $cfg is 1; the log gets the separator line; attempts.jsonl gets the
## ended attempt's record ($rec) and the new one's; the launch file written as
## `$lf.$tok` takes its place. The claim is `mkdir attempts/$p`: of two resumes at once
## only one makes it (the other answers `error=busy`; a mkdir that fails for another
## reason says why). An attempt $prev with a live process and no exit code is never
## superseded (`error=running`), nor one whose job's submission is under way
## (`error=starting`, submitting.sh). Sent again after a lost answer (train.token already
## holds $tok) it changes nothing. Needs $rd, $tok, $prev (the token the resume read), $n, $p, $ck,
## $cfg, $sep, $rec, $lf, liveness.sh's `marked_pids` and submitting.sh.
cd "$rd" 2>/dev/null || { echo "error=no run directory"; exit 0; }
# Another resume took an attempt first: say which one it took (the attempts filed
# before it, plus one), not the number this resume would have given its own.
busy() {
  bn=0
  for bd in attempts/[0-9]*; do [ -d "$bd" ] && bn=$((bn + 1)); done
  echo "error=busy"
  echo "taken=$((bn + 1))"
}
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != "$tok" ]; then
  mkdir attempts 2>/dev/null
  if [ "$rf" != "$prev" ]; then rm -f -- "$lf.$tok"; busy; exit 0; fi
  # The attempt to supersede wrote no exit code and has a live process (another resume
  # launched it after this one read it claimed, never launched): it runs. Never two
  # trainers in one run dir. (A process left over by an attempt that wrote its exit code
  # is no launch: as the probe, the claim goes by the code.)
  if [ ! -s status ] && [ -n "$prev" ] && [ -n "$(marked_pids "$prev")" ]; then
    rm -f -- "$lf.$tok"; echo "error=running"; exit 0
  fi
  # The attempt to supersede is still being submitted (its sbatch has not answered; it
  # reads `starting`): its job may be queued any moment. Never two jobs in one run dir.
  if submit_under_way .; then rm -f -- "$lf.$tok"; echo "error=starting"; exit 0; fi
  if ! why=$(mkdir "attempts/$p" 2>&1); then
    rm -f -- "$lf.$tok"
    # Another resume made it first: busy. Else nothing can be made there (a full disk,
    # a read-only file system), and no other resume is to blame.
    if [ -d "attempts/$p" ]; then busy
    else printf 'error=cannot make attempts/%s: %s\n' "$p" "${why##*: }"; fi
    exit 0
  fi
  for f in status status.tmp status_attempt stop_requested stopped launch.lock train.pid \
           train.ident slurm_job_id submit_unknown submit_error submit_message gpus queued; do
    if [ -e "$f" ]; then mv -f -- "$f" "attempts/$p/$f"; fi
  done
  if [ "$cfg" = 1 ] && [ -f config.yaml ]; then
    # The key's value may go on over indented (or blank) lines, a block scalar's: they
    # go with it, else they would join the key before it.
    awk '/^resume_from_checkpoint[ \t]*:/ { skip = 1; next }
         skip && /^([ \t]|\r?$)/ { next }
         { skip = 0; print }' config.yaml > config.yaml.tmp &&
      { [ -z "$ck" ] || printf "resume_from_checkpoint: '%s'\n" "$ck"; } >> config.yaml.tmp &&
      mv -f config.yaml.tmp config.yaml
  fi
  # On a line of its own, even after a line the crash cut short (a bar's `\r` redraw).
  if [ -s train.log ] && [ -n "$(tail -c 1 train.log)" ]; then echo >> train.log; fi
  printf '%s\n' "$sep" >> train.log
  printf '%s\n{"attempt": %s, "started": %s, "checkpoint": "%s"}\n' \
    "$rec" "$n" "$(date +%s)" "$ck" >> attempts.jsonl
  printf '%s\n' "$tok" > train.token.tmp && mv -f train.token.tmp train.token
  mv -f -- "$lf.$tok" "$lf"
fi
echo "claimed=$n"
