## The host's side of GPU choice: which GPUs are free, which are held by our live runs,
## and the lock under which GPUs are given. Used by the wrapper of a queued run
## (queue.sh) and by a client's start (`held_gpus`, `claim_gpus` in scripts.py).
## Needs liveness.sh and gpu_box.sh (where the lock and the records are: per box).
##
## The rule for "free" is the client's (`HostGpus.is_free` in metrics/gpus.py): no
## process on it, under 10% busy, at most half its memory used, not given to a live run
## of ours. tests/unit/test_gpu_rule_agrees.py feeds both the same nvidia-smi text.
##
## `gpu_rule WANT IDS` reads gpu_sample.sh's lines and `gpu_held=INDEX,RUN` lines and
## prints `free=INDEX` per free GPU, then `take=I,J` (WANT least busy free GPUs, or the
## GPUs IDS, when free) or `why=TEXT` (why not, in the words of the client's refusal).
gpu_rule() {
  awk -v want="$1" -v ids="$2" '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    function num(s) { s = trim(s); if (s == "[N/A]" || s == "N/A" || s == "[Not Supported]") return "na"
      return s ~ /^[+-]?[0-9]+$/ ? s + 0 : "" }
    /^gpu=/ { rows++; if (split(substr($0, 5), f, ",") != 5) next
      i = num(f[1]); u = num(f[3]); m = num(f[4]); t = num(f[5])
      if (i == "" || i == "na" || u == "" || m == "" || t == "") next
      n++; idx[n] = i; uuid[n] = substr(trim(f[2]), 1, 80)
      uk[n] = (u == "na"); mk[n] = (m == "na")
      util[n] = u == "na" ? 0 : u; used[n] = m == "na" ? 0 : m; total[n] = t == "na" ? 0 : t
      next }
    /^gpu_smi=/ { smi = substr($0, 9); next }
    /^gpu_app=/ { apps++; if (split(substr($0, 9), a, ",") < 5) next
      u = substr(trim(a[1]), 1, 80); held[u]++; if (held[u] <= 3) who[u] = who[u] (held[u] > 1 ? "; " : "") \
        (trim(a[5]) == "" ? "unknown user" : trim(a[5])) ", pid " (trim(a[2]) ~ /^[0-9]+$/ ? trim(a[2]) + 0 : "?")
      next }
    /^gpu_held=[0-9]+,/ { split(substr($0, 10), h, ","); if (!((h[1] + 0) in ours)) ours[h[1] + 0] = h[2]; next }
    END {
      if (smi == "missing") err = "no nvidia-smi"
      else if (smi == "124") err = "nvidia-smi timed out"
      else if (smi != "0") err = "nvidia-smi failed"
      else if (rows > 64 || apps > 256) err = "malformed nvidia-smi output"
      nfree = 0
      for (k = 1; k <= n && err == ""; k++) {
        busy = util[k] >= 10 || used[k] > int(total[k] / 2)
        free[k] = !busy && !(uuid[k] in held) && !(idx[k] in ours)
        if (free[k]) { nfree++; print "free=" idx[k] }
        else {
          d = "GPU " idx[k] ": " (uk[k] ? "?" : util[k]) "% busy, " (mk[k] ? "?" : int(used[k] / 1024 + 0.5)) " GiB"
          if (uuid[k] in held) d = d ", held by " who[uuid[k]] (held[uuid[k]] > 3 ? " and " held[uuid[k]] - 3 " more" : "")
          else if (idx[k] in ours) d = d ", given to our run " ours[idx[k]]
          desc[k] = d
        }
      }
      if (ids != "") { what = "GPU(s) " ids; c = split(ids, want_ids, ",") } else what = want " free GPU(s)"
      if (err != "") { print "why=waiting for " what ": cannot tell which GPUs are free (" err ")"; exit }
      if (ids != "") {
        why = ""
        for (j = 1; j <= c; j++) {
          for (k = 1; k <= n && idx[k] != want_ids[j] + 0; k++) ;
          if (k > n) why = why (why == "" ? "" : "; ") "GPU " want_ids[j] " does not exist"
          else if (!free[k]) why = why (why == "" ? "" : "; ") desc[k]
        }
        if (why == "") print "take=" ids; else print "why=waiting for " what ": " why
        exit
      }
      if (nfree < want) {
        why = ""
        for (k = 1; k <= n; k++) if (!free[k]) why = why (why == "" ? "" : "; ") desc[k]
        if (n < want) why = why (why == "" ? "" : "; ") "the host has " n
        print "why=waiting for " what ": " why; exit
      }
      # The least busy free ones (util, then memory, then index), as the client ranks them.
      for (t = 1; t <= want; t++) {
        best = 0
        for (k = 1; k <= n; k++) if (free[k] && !took[k] && (!best || util[k] < util[best] ||
            (util[k] == util[best] && (used[k] < used[best] || (used[k] == used[best] && idx[k] < idx[best])))))
          best = k
        took[best] = 1
      }
      out = ""
      for (k = 1; k <= n; k++) if (took[k]) pick[++p] = idx[k]
      for (a1 = 1; a1 <= p; a1++) for (b1 = a1 + 1; b1 <= p; b1++) if (pick[b1] < pick[a1]) { x = pick[a1]; pick[a1] = pick[b1]; pick[b1] = x }
      for (a1 = 1; a1 <= p; a1++) out = out (a1 > 1 ? "," : "") pick[a1]
      print "take=" out
    }'
}

## `held_gpus WORKDIR [PRUNE]`: `gpu_held=INDEX,RUN` for each GPU recorded in the `gpus`
## file of a run of ours that is live, or whose start has not launched it yet (a client
## claimed its GPUs within the hour, and is uploading: `gpus.claimed` holds the host's
## uptime then; a client that died mid-upload must not hold GPUs for good). A run that
## ended (`status`) or died holds none. Which runs: every one the box's records name
## (gpu_box.sh), whatever its workdir; and, as older versions recorded GPUs in the run
## dir only, every run dir of WORKDIR and of each workdir the box has given GPUs in (one
## glob each; a run found both ways counts once). With PRUNE=1 (only under the lock:
## a claim may be writing a record anew) the records of runs that hold none are removed,
## so that the box's records stay as few as its live runs, and so are workdirs that are
## gone.
held_gpus() {
  hg_now='' hg_seen=$hg_nl hg_wds=$hg_nl
  box_dir "$1"
  for hg_r in "$bx"/held/*; do
    [ -f "$hg_r" ] || continue
    hg_d=''; read -r hg_d 2>/dev/null < "$hg_r"
    case $hg_d in /*) ;; *) hg_d=;; esac
    if [ -n "$hg_d" ] && hg_run "$hg_d"; then hg_seen=$hg_seen$hg_d$hg_nl
    elif [ "${2-}" = 1 ]; then rm -f "$hg_r"
    fi
  done
  case $1 in /*) hg_in "${1%/}";; *) hg_in "$PWD/${1%/}";; esac
  [ -r "$bx/workdirs" ] || return 0
  hg_keep='' hg_gone=''
  while IFS= read -r hg_w; do
    if [ -d "$hg_w" ]; then hg_in "$hg_w"; hg_keep=$hg_keep$hg_w$hg_nl; else hg_gone=1; fi
  done < "$bx/workdirs"
  if [ -n "$hg_gone" ] && [ "${2-}" = 1 ]; then
    printf '%s' "$hg_keep" > "$bx/workdirs.tmp" && mv "$bx/workdirs.tmp" "$bx/workdirs"
  fi
}
hg_nl='
'
## `hg_in WORKDIR`: held_gpus's lines for the run dirs of WORKDIR not counted yet.
hg_in() {
  case $hg_wds in *"$hg_nl$1$hg_nl"*) return 0;; esac
  hg_wds=$hg_wds$1$hg_nl
  for hg_f in "$1"/*/gpus; do
    case $hg_seen in *"$hg_nl${hg_f%/gpus}$hg_nl"*) continue;; esac
    hg_run "${hg_f%/gpus}" || :
  done
}
## `hg_run RUNDIR`: its `gpu_held=` lines, and 0, when the run holds its GPUs (the rule
## above); 1 when it holds none.
hg_run() {
  [ -r "$1/gpus" ] || return 1
  [ -e "$1/status" ] && return 1
  read_file "$1/train.pid"; hg_pid=$rf
  if [ -z "$hg_pid" ]; then
    [ -n "$hg_now" ] || { q_uptime; hg_now=$qu; }
    read_file "$1/gpus.claimed"
    case $rf in ''|*[!0-9]*) return 1;; esac
    if [ $((hg_now - rf)) -gt 3600 ] || [ "$hg_now" -lt "$rf" ]; then return 1; fi
  else
    read_file "$1/train.ident"
    hg_o=$own_pgrp hg_s=$sh_pgrp; own_pgrp=none sh_pgrp=none
    is_live "$hg_pid" "$rf" "$1"; hg_live=$?
    own_pgrp=$hg_o sh_pgrp=$hg_s
    [ $hg_live = 0 ] || return 1
  fi
  read_file "$1/gpus"
  hg_ids=$rf
  while [ -n "$hg_ids" ]; do
    hg_i=${hg_ids%%,*}
    case $hg_i in ''|*[!0-9]*) ;; *) echo "gpu_held=$hg_i,${1##*/}";; esac
    case $hg_ids in *,*) hg_ids=${hg_ids#*,};; *) hg_ids=;; esac
  done
}

## `q_lock QUEUEDIR` / `q_unlock QUEUEDIR`: the moment GPUs are given, one taker at a
## time, on every host (a `mkdir`: no flock needed). Its `owner` holds the host's uptime
## and the taker's pid: a lock whose taker is gone, or older than 30 s (a take lasts one
## bounded nvidia-smi sample), is broken. QUEUEDIR (the box's state dir, gpu_box.sh) is
## made for the lock and removed with it when empty. A lock that nothing holds and that
## still cannot be made (a read-only or full disk, a path this user may not write) is
## given up on: `q_lock` returns 1 and `ql_why` says why, in the OS's words.
q_uptime() { qu=''; read -r qu _ 2>/dev/null < /proc/uptime; qu=${qu%.*}; [ -n "$qu" ] || qu=$(date +%s); }
q_lock() {
  ql_n=0 ql_no=0 ql_why=
  [ -d "$1" ] || mkdir -p "$1" 2>/dev/null
  until mkdir "$1/lock" 2>/dev/null; do
    # Gone since: the last taker removed it empty; make it again and retry at once.
    if [ ! -d "$1" ]; then mkdir -p "$1" 2>/dev/null && continue; fi
    # Not held, yet not made: three looks in a row (a lock released in between is made
    # at the next), then give up, or this would spin for ever.
    if [ -e "$1/lock" ]; then ql_no=0; else ql_no=$((ql_no + 1)); fi
    if [ $ql_no -ge 3 ]; then
      ql_why=$(mkdir -p "$1" 2>&1 && mkdir "$1/lock" 2>&1) && break  # made after all: ours
      if [ ! -e "$1/lock" ]; then
        ql_at=$1
        # shellcheck disable=SC2088  # a literal ~, as the user would write the path
        case $1 in "${HOME:-/nowhere}"/*) ql_at="~/${1#"$HOME"/}";; esac
        ql_why="cannot take the host's GPU lock ($ql_at): ${ql_why##*: }"
        return 1
      fi
      ql_no=0  # another taker has it now: the lock works, wait for it as ever
    fi
    ql_t='' ql_p=''; read -r ql_t ql_p 2>/dev/null < "$1/lock/owner"
    q_uptime; ql_n=$((ql_n + 1))
    case $ql_t$ql_p in
      ''|*[!0-9]*)  # no owner for 3 s, in the same lock dir (inode): its taker died
        q_ino "$1/lock"; [ "$qi" = "${ql_li-}" ] || ql_n=1; ql_li=$qi
        [ $ql_n -gt 30 ] && q_break "$1" "$qi" "$ql_t" "$ql_p";;
      *) ql_n=0  # owned: an ownerless lock is counted from its first look, never before
         if [ $((qu - ql_t)) -gt 30 ] || [ "$qu" -lt "$ql_t" ] || ! kill -0 "$ql_p" 2>/dev/null; then
           q_ino "$1/lock"; q_break "$1" "$qi" "$ql_t" "$ql_p"
         fi;;
    esac
    sleep 0.1
  done
  q_uptime; echo "$qu $$" > "$1/lock/owner"
}
q_unlock() { rm -rf "$1/lock"; rmdir "$1" 2>/dev/null || :; }
## `q_ino PATH`: its inode in $qi ('' when gone).
q_ino() {
  # shellcheck disable=SC2046  # ls -di's two words, split on purpose
  set -- $(ls -di "$1" 2>/dev/null); qi=${1-}
}
## `q_break QUEUEDIR INODE T P`: break the lock judged stale (inode INODE, owner line
## `T P`) and no other. Two waiters may judge the same dead lock; one that removed it by
## its path after a pause removed the other's new lock, and both held it. So the break
## works from inside the very dir judged (`cd` holds it, whatever is at the path since),
## checks its inode and owner line again there, and one breaker alone marks it (`ln -s`
## is atomic); it is emptied there, then `rmdir` by path removes it, which a new taker's
## lock refuses (its owner line is in it).
q_break() {
  (
    cd "$1/lock" 2>/dev/null || exit 1
    q_ino .; [ -n "$qi" ] && [ "$qi" = "$2" ] || exit 1
    qb_t='' qb_p=''; read -r qb_t qb_p 2>/dev/null < owner
    [ "$qb_t" = "$3" ] && [ "$qb_p" = "$4" ] || exit 1
    if ! ln -s "$$" broken 2>/dev/null; then
      # Another waiter is breaking it; one killed in the midst leaves its mark to the next.
      qb_by=$(ls -l broken 2>/dev/null); qb_by=${qb_by##*-> }
      case $qb_by in ''|*[!0-9]*) ;; *) kill -0 "$qb_by" 2>/dev/null || rm -f broken;; esac
      exit 1
    fi
    rm -f owner broken
  ) && rmdir "$1/lock" 2>/dev/null
  return 0
}
