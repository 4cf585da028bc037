## Create the workdir (0700) and the run dir with `train.token` and attempt 1's own
## directory (attempt.sh); print `dir=PATH`, or `exists` when the run dir holds someone
## else's token. Needs $wd, $run_id, $tok, attempt.sh.
# shellcheck disable=SC2174  # only the workdir itself is made private, not its parents
mkdir -p -m 700 "$wd" || exit 1
cd "$wd" || exit 1
if mkdir -m 700 "$run_id" 2>/dev/null; then
  printf '%s\n' "$tok" > "$run_id/train.token"
  attempt_begin "$run_id" 1
fi
rf=; [ -r "$run_id/train.token" ] && read -r rf < "$run_id/train.token"
if [ "$rf" = "$tok" ]; then echo "dir=$(pwd)/$run_id"; else echo exists; fi
