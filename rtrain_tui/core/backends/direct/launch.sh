## Start run.sh detached in its own session; wait until it has written train.pid and
## print `pid=PID` (or `error=...`). Needs $rd, $tok.
cd "$rd" || { echo "error=no run directory"; exit 0; }
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != "$tok" ]; then echo "error=not this start's run directory"; exit 0; fi
if mkdir launch.lock 2>/dev/null; then
  RTRAIN_RUN=$tok; export RTRAIN_RUN
  if command -v setsid >/dev/null 2>&1; then
    setsid sh ./run.sh >/dev/null 2>&1 </dev/null &
  else
    # No setsid: job control gives the job its own process group, nohup shields it
    # from the hangup when this session ends.
    set -m
    nohup sh ./run.sh >/dev/null 2>&1 </dev/null &
  fi
fi
i=0
# Polled every 10 ms (at most 5 s): the wrapper writes it within a few ms, and every
# start waits for this line.
while [ ! -s train.pid ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
echo "pid=$(cat train.pid 2>/dev/null)"
