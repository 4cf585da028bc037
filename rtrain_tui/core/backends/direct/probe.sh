## The refresh probe of a box: `probe I RUNDIR NEED_END` prints one tab-separated line
## for the run, its index I and then key=value facts. A run whose wrapper lives costs no
## fork; the scan for marked processes runs only when a wrapper is gone without an exit
## code, once for all runs. With NEED_END=1 an ended run also reports when it ended:
## `mt_flush`, after the last `probe`, prints `I<TAB>ended=EPOCH` for all of them at
## once (its `status` file's last write, else its log's; one `stat`, not a fork per run).
## A queued run (queue.sh) says so in a line of its own: `I<TAB>queued=1<TAB>place=N<TAB>reason=...`.
## When a queued attempt got its GPUs, a line of its own too: `I<TAB>running_since=ATTEMPT EPOCH`.
## Why an attempt waits, gave up or stalled is read from its own directory (attempt.sh's
## `ad`): never an earlier attempt's. Needs liveness.sh, attempt.sh, mtimes.sh and
## `own_groups` run first.
probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/train.pid"; pid=$rf; read_file "$rd/train.ident"; ident=$rf
  read_file "$rd/train.token"; token=$rf
  read_file "$rd/status"; code=$rf
  read_file "$rd/stop_requested"; stop=0; [ -n "$rf" ] && stop=1; stop_by=$rf
  stopped=0; [ -e "$rd/stopped" ] && stopped=1
  launched=0; if [ -e "$rd/launch.lock" ] || [ -n "$pid" ]; then launched=1; fi
  alive=0
  if [ -z "$code" ] && [ $stopped = 0 ]; then
    if is_live "$pid" "$ident" "$rd" || run_marked "$token"; then alive=1; fi
  fi
  # The wrapper died at its last line: `echo $rc > status.tmp` made the file but a full
  # disk refused the code. Its code may still be there; else say how much space is left.
  unwritten=0; free=
  if [ $alive = 0 ] && [ -z "$code" ] && [ $stopped = 0 ] && [ -e "$rd/status.tmp" ]; then
    read_file "$rd/status.tmp"; code=$rf
    if [ -z "$code" ]; then
      unwritten=1; free=$(df -Pk "$rd" 2>/dev/null | awk 'NR == 2 { print $4 }')
    fi
  fi
  ## Retry by itself (retry.sh): a live wrapper waiting to try again says why; a
  ## failed one that gave up says why it did not retry.
  ## A live run's stall watchdog (watch.sh) keeps the log's age in `stalled`.
  attempt_dir "$rd"
  rw=; st=; gi=; if [ $alive = 1 ]; then read_file "$ad/retry_wait"; rw=$rf; read_file "$ad/stalled"; st=$rf
    read_file "$ad/gpus_idle"; gi=$rf
  elif [ -n "$code" ] && [ "$code" != 0 ]; then read_file "$ad/retry_gave_up"; rw=$rf
    ## A queued run that could not wait (queue.sh's lock): why, in the same slot.
    [ -n "$rw" ] || { read_file "$ad/gave_up"; rw=$rf; }
    ## Stopped by its stall watchdog (watch.sh, `--on-stall stop`): the stall is why.
    if [ "$stop_by" = stall ]; then read_file "$ad/stalled"; st=$rf; read_file "$ad/gpus_idle"; gi=$rf; fi
  fi
  ## Gone with no exit code, and the host booted since the wrapper started (train.ident
  ## holds its boot id then): a reboot, which a refresh may retry (core/resume.py).
  rebooted=0
  if [ $alive = 0 ] && [ -z "$code" ] && [ $stopped = 0 ] && [ -n "$ident" ]; then
    boot_id; [ "${ident#* }" != "$bi" ] && rebooted=1
  fi
  if [ "$3" = 1 ] && [ $alive = 0 ] && [ -n "$pid$code" ]; then
    ef="$rd/status"; [ -e "$ef" ] || ef="$rd/train.log"
    [ -e "$ef" ] && mt_add "$1${tab}ended=" "$ef"
  fi
  printf '%s\texists=1\tpid=%s\talive=%s\tcode=%s\tstop=%s\tstopped=%s\tlaunched=%s\tunwritten=%s\tfree_kb=%s\tretry=%s\trebooted=%s\tstalled=%s\tgpus_idle=%s\n' \
    "$1" "$pid" "$alive" "$code" "$stop" "$stopped" "$launched" "$unwritten" "$free" "$rw" "$rebooted" "$st" "$gi"
  # When a `--queue` run's attempt got its GPUs (`ATTEMPT EPOCH`): its cost counts from
  # then, and the index keeps it (core/runs/cost.py).
  read_file "$rd/running_since"
  [ -n "$rf" ] && printf '%s\trunning_since=%s\n' "$1" "$rf"
  # A queued run (`start --queue`): its wrapper waits on the host and keeps `queued`
  # (its place and why) up to date; a line of its own, read into the same run's facts.
  if [ $alive = 1 ] && [ -r "$rd/queued" ]; then
    q_place='' q_why=''; IFS=$tab read -r q_place q_why 2>/dev/null < "$rd/queued"
    printf '%s\tqueued=1\tplace=%s\treason=%s\n' "$1" "$q_place" "$q_why"
  fi
}
