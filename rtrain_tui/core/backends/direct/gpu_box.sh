## The host's GPU state, once per box for this user: the lock GPUs are given under
## (`lock/`, gpu_rule.sh's q_lock), the records of which run dirs hold GPUs (`held/`), the
## workdirs GPUs were given in (`workdirs`), and the `--queue` order (`q<seq>` entries,
## `seq`, `every`, `sampled`, `why`: queue.sh). GPUs belong to the box, not to a workdir:
## two laptops starting into two workdirs on one box share them, so none of this may live
## in a workdir, or each workdir's lock and records would hand out GPU 0 again (R03).
##
## Where: `$HOME/.local/state/rtrain-tui/gpus-HOSTNAME/` (the XDG base-directory place for
## state that outlives a process and is no cache). Why each part:
## - HOME: per user, and the same for every client of that user whatever its workdir (a
##   client's ssh session and every wrapper it starts). XDG_STATE_HOME is not read, on
##   purpose: two sessions must agree on one path, and only HOME is sure to be the same
##   in each. Another user's runs show as theirs in nvidia-smi, as before.
## - the host name: hosts sharing one home (NFS) keep one each, or one box's lock would
##   stall another's and one box prune another's live records. Not the boot id: the
##   queue's pace and the workdir list outlive a reboot (runs do not: their records die
##   by the liveness rule).
## - no HOME: the workdir's `.queue/`, where older versions kept all of it.
##
## `box_dir WORKDIR`: the box's state dir in $bx.
box_dir() {
  bx_h=; read -r bx_h 2>/dev/null < /proc/sys/kernel/hostname
  [ -n "$bx_h" ] || bx_h=$(uname -n 2>/dev/null)
  case $bx_h in *[!A-Za-z0-9._-]*) bx_h=$(printf '%s' "$bx_h" | tr -c 'A-Za-z0-9._-' _);; esac
  if [ -n "${HOME-}" ] && [ -n "$bx_h" ]; then
    bx=${HOME%/}/.local/state/rtrain-tui/gpus-$bx_h
  else
    bx=${1%/}/.queue
  fi
}
## `box_record RUNDIR`: record that the run in RUNDIR (absolute) holds the GPUs in its
## `gpus` file: `held/NAME` holds the path (NAME: the run id and the path's checksum, so
## one record per run dir, whichever workdir it is in), and its workdir gets a line in
## `workdirs` (held_gpus looks there for runs older versions started). Returns 1 when it
## cannot be written.
box_record() {
  box_dir "${1%/*}"
  [ -d "$bx/held" ] || mkdir -p "$bx/held" 2>/dev/null || return 1
  # shellcheck disable=SC2046  # cksum's two words (sum, length), split on purpose
  set -- "$1" $(printf '%s' "$1" | cksum)
  br_f=$bx/held/${1##*/}-$2-$3
  printf '%s\n' "$1" > "$br_f.tmp" && mv "$br_f.tmp" "$br_f" || return 1
  br_w=${1%/*}
  if [ -r "$bx/workdirs" ]; then
    while IFS= read -r br_l; do [ "$br_l" = "$br_w" ] && return 0; done < "$bx/workdirs"
  fi
  printf '%s\n' "$br_w" >> "$bx/workdirs"
}
