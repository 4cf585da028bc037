## Claim notifications: `claim I RUNDIR MARKER` makes RUNDIR/notified/MARKER. mkdir is
## atomic, so of every client (and the run's own wrapper) that asks, exactly one gets
## `claimed` and sends the message; the others get `taken`. With `claimed` comes the
## tail of the run's train.log, base64 on one line, for the message's step and loss.
claim() {
  if [ ! -d "$2" ]; then printf 'claim\t%s\tmissing\n' "$1"; return 0; fi
  mkdir "$2/notified" 2>/dev/null
  if mkdir "$2/notified/$3" 2>/dev/null; then
    printf 'claim\t%s\tclaimed\t' "$1"
    tail -c 32768 "$2/train.log" 2>/dev/null | base64 2>/dev/null | tr -d '\n'
    printf '\n'
  else
    printf 'claim\t%s\ttaken\n' "$1"
  fi
}
