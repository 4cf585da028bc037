## Make a run directory whose run ended ready for attempt $n, once. The claim is
## `mkdir .rtrain/attempts/$n`, the new attempt's own directory (attempt.sh): of two
## resumes at once only one makes it (the other answers `error=busy`; a mkdir that fails
## for another reason says why). What attempt $p left in its own directory (its retry
## give-up, its stall watchdog's files) stays there and is never read as attempt $n's:
## nothing is moved by name but the files the run-dir contract keeps at the top level
## for the current attempt (`attempt_top`: its exit code, stop marks, pid, identity,
## launch lock, job id, GPUs), which go to attempt $p's directory; then $n is the
## current attempt. train.token gets the new attempt's token; config.yaml's top-level
## `resume_from_checkpoint` (its line and the indented lines its value goes on over) is
## replaced (or removed, on a restart) when $cfg is 1; the log gets the separator line;
## attempts.jsonl gets the ended attempt's record ($rec) and the new one's; the launch
## file written as `$lf.$tok` takes its place. A run dir made before `.rtrain/` gets one
## here, its attempts.jsonl and launch.json moved in. An attempt $prev with a live
## process and no exit code is never superseded (`error=running`), nor one whose job's
## submission is under way (`error=starting`, submitting.sh). Sent again after a
## lost answer (train.token already holds $tok) it changes nothing. Needs $rd, $tok,
## $prev (the token the resume read), $n, $p, $ck, $cfg, $sep, $rec, $lf, attempt.sh,
## liveness.sh's `marked_pids` and submitting.sh.
cd "$rd" 2>/dev/null || { echo "error=no run directory"; exit 0; }
# Another resume took an attempt first: say which one it took (the newest attempt's
# directory), not the number this resume would have given its own.
busy() {
  bn=0
  for bd in .rtrain/attempts/[0-9]*; do
    bd=${bd##*/}; case $bd in *[!0-9]*) continue;; esac
    [ "$bd" -gt "$bn" ] && bn=$bd
  done
  [ "$bn" != 0 ] || { attempt_no .; bn=$an; }  # an older run dir's count
  echo "error=busy"
  echo "taken=$bn"
}
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != "$tok" ]; then
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
  # An older run dir (no .rtrain/) gets the layout, once: its records move in, and its
  # current attempt (one more than its attempts/N/) is the layout's current one.
  if [ ! -d .rtrain ]; then
    attempt_no .
    if mkdir .rtrain 2>/dev/null; then
      for f in attempts.jsonl launch.json; do [ ! -f "$f" ] || mv -f -- "$f" ".rtrain/$f"; done
      attempt_begin . "$an"
    fi
  fi
  mkdir .rtrain/attempts 2>/dev/null
  if ! why=$(mkdir ".rtrain/attempts/$n" 2>&1); then
    rm -f -- "$lf.$tok"
    # Another resume made it first: busy. Else nothing can be made there (a full disk,
    # a read-only file system), and no other resume is to blame.
    if [ -d ".rtrain/attempts/$n" ]; then busy
    else printf 'error=cannot make .rtrain/attempts/%s: %s\n' "$n" "${why##*: }"; fi
    exit 0
  fi
  mkdir -p ".rtrain/attempts/$p"
  for f in $attempt_top; do
    if [ -e "$f" ]; then mv -f -- "$f" ".rtrain/attempts/$p/$f"; fi
  done
  attempt_begin . "$n"
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
    "$rec" "$n" "$(date +%s)" "$ck" >> .rtrain/attempts.jsonl
  printf '%s\n' "$tok" > train.token.tmp && mv -f train.token.tmp train.token
  mv -f -- "$lf.$tok" "$lf"
fi
echo "claimed=$n"
