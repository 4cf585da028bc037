## Ask Slurm to end the run's job: `scancel` itself ($full_cancel = 1) or TERM to every
## process (`--full`). Needs $rd, $tok (this stop's nonce), $full_cancel, $job_at: the
## job a first sending found (it says `job=`), so the rest of a stop never cancels the
## job of an attempt a resume submitted meanwhile (empty: the one in the run dir).
rt_cancel() {
  if [ "$full_cancel" = 1 ]; then scancel "$1"; else scancel --signal=TERM --full "$1"; fi
}
job=$job_at; [ -n "$job" ] || { [ -r "$rd/slurm_job_id" ] && read -r job < "$rd/slurm_job_id"; }
case $job in ''|*[!0-9_]*) echo result=not_running; exit 0;; esac
st=$(squeue -h -t all -j "$job" -o '%T' 2>/dev/null)
[ -n "$st" ] || st=$(scontrol -o show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
ours=0; [ "$(cat "$rd/stop_requested" 2>/dev/null)" = "$tok" ] && ours=1
case $st in
  PENDING|REQUEUE*|RESV_DEL_HOLD)
    [ -s "$rd/stop_requested" ] || echo "$tok" > "$rd/stop_requested"
    scancel "$job" >/dev/null 2>&1; echo result=signalled; echo queued=1;;
  RUNNING|CONFIGURING|COMPLETING|SUSPENDED|STOPPED|SIGNALING)
    [ -s "$rd/stop_requested" ] || echo "$tok" > "$rd/stop_requested"
    if out=$(rt_cancel "$job" 2>&1); then echo result=signalled
    else echo "result=error"; printf 'why=%s\n' "$out" | head -n 1; fi;;
  *)
    if [ $ours = 1 ]; then echo result=signalled; else echo result=not_running; fi;;
esac
echo "state=$st"; echo "job=$job"
