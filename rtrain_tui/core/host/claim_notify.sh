## Claim notifications: `claim I RUNDIR EVENT TOKEN` makes RUNDIR/notified/aN-EVENT. mkdir
## is atomic, so of every client (and the run's own wrapper, notify_send.sh) that asks,
## exactly one gets `claimed` and sends the message; the others get `taken`. N is the
## run's attempt by the host's own count (attempt.sh's `attempt_no`, as resume.sh and
## find_runs.sh count them): the wrapper of a run its host retried and a client that saw
## only its end name the same attempt. Needs attempt.sh. With `claimed` comes the tail of
## the run's train.log, base64 on one line, for the message's step and loss.
## The claimer's TOKEN goes into the marker (`by`): a claim sent again with the same
## token (the connection dropped after the host made the marker, so its answer was lost
## and the client sent the script once more; or the next refresh retries it) finds its
## own marker and is `claimed` again, where it would otherwise be nobody's.
## `claim_mark RUNDIR EVENT [TOKEN]` is the claim alone: true for the one caller that made it.
claim_mark() {
  attempt_no "$1"
  # shellcheck disable=SC2154  # `an`: attempt.sh's, which every script sends before this
  cm_n=$an
  cm_m="$1/notified/a$cm_n-$2"
  mkdir "$1/notified" 2>/dev/null
  if mkdir "$cm_m" 2>/dev/null; then
    [ -z "$3" ] || printf '%s\n' "$3" > "$cm_m/by"
    return 0
  fi
  [ -n "$3" ] && [ "$(cat "$cm_m/by" 2>/dev/null)" = "$3" ]
}
claim() {
  if [ ! -d "$2" ]; then printf 'claim\t%s\tmissing\n' "$1"; return 0; fi
  if claim_mark "$2" "$3" "$4"; then
    printf 'claim\t%s\tclaimed\t' "$1"
    tail -c 32768 "$2/train.log" 2>/dev/null | base64 2>/dev/null | tr -d '\n'
    printf '\n'
  else
    printf 'claim\t%s\ttaken\n' "$1"
  fi
}
