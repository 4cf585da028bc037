## List what judging a run's checkpoints needs, in one round trip (the rule and the
## reader of this output are in core/runs/checkpoints.py). Needs $rd and $mk (a nonce).
## For each `checkpoint-N` directory 1 to 3 levels under the run dir (names of safe
## characters only, so none can break a line): `ck<TAB>PATH`, then `f<TAB>NAME<TAB>1|0`
## per file in it (1: not empty), then for a trainer_state.json `ts<TAB>SIZE<TAB>whole`,
## its text, a newline and $mk on a line; past 64 KiB (a long run's log_history) only its
## first 16 KiB and last 64 bytes, each ended the same way (`ts<TAB>SIZE<TAB>head`).
## Globs, `[ -s ]` and `case`: no fork per file, two or three per trainer_state.json.
cd "$rd" 2>/dev/null || { echo nodir; exit 0; }
for d in checkpoint-* ./*/checkpoint-* ./*/*/checkpoint-*; do
  d=${d#./}
  [ -d "$d" ] || continue
  case $d in *[!A-Za-z0-9._/-]*|.*|*/.*) continue;; esac
  case ${d##*/} in checkpoint-|checkpoint-*[!0-9]*) continue;; esac
  printf 'ck\t%s\n' "$d"
  for f in "$d"/*; do
    [ -f "$f" ] || continue
    n=${f##*/}
    case $n in *[!A-Za-z0-9._-]*) continue;; esac
    if [ -s "$f" ]; then printf 'f\t%s\t1\n' "$n"; else printf 'f\t%s\t0\n' "$n"; fi
  done
  t=$d/trainer_state.json
  [ -f "$t" ] || continue
  z=$(wc -c < "$t" 2>/dev/null) || z=0
  z=$((z + 0))
  if [ "$z" -le 65536 ]; then
    printf 'ts\t%s\twhole\n' "$z"
    cat -- "$t" 2>/dev/null
  else
    printf 'ts\t%s\thead\n' "$z"
    dd if="$t" bs=16384 count=1 2>/dev/null
    printf '\n%s\n' "$mk"
    tail -c 64 -- "$t" 2>/dev/null
  fi
  printf '\n%s\n' "$mk"
done
