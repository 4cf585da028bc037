tab='	'
mt_nl='
'
mt_list='' mt_part='' mt_n=0 mt_o=''
mt_add() {
  mt_part="$mt_part$1$mt_nl$2$mt_nl" mt_n=$((mt_n + 1))
  case $mt_n in *00|*50) mt_list=$mt_list$mt_part mt_part='';; esac
  [ "$mt_n" -lt 2000 ] || mt_flush
}
mt_flush() { mtimes "$mt_list$mt_part"; mt_list='' mt_part='' mt_n=0; }
mtimes() {
  [ -n "$1" ] || return 0
  if [ -z "$mt_o" ]; then
    if stat -c %Y / >/dev/null 2>&1; then mt_o=-c mt_f='%Y %n'; else mt_o=-f mt_f='%m %N'; fi
  fi
  { printf '%s//\n' "$1"
    printf '%s' "$1" | sed -n 'n;p' | tr '\n' '\000' | xargs -0 stat "$mt_o" "$mt_f" 2>/dev/null
  } | awk '
    !sep && $0 == "//" { sep = 1; next }
    !sep { if (NR % 2) pre[++n] = $0; else path[n] = $0; next }
    { t = $1; sub(/^[^ ]* /, ""); when[$0] = t }
    END { for (i = 1; i <= n; i++) print pre[i] ((path[i] in when) ? when[path[i]] : "") }'
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_dir() {
  if [ -d "$1/.rtrain" ]; then
    an=; [ -r "$1/.rtrain/attempt" ] && read -r an < "$1/.rtrain/attempt"
    # Host text, bounded as attempt_layout.MAX_ATTEMPT: a garbled number is attempt 1.
    case $an in ''|0*|*[!0-9]*|?????*) an=1;; esac
    [ "$an" -le 1000 ] || an=1
    # shellcheck disable=SC2034  # the answer, read by the scripts that call this
    ad=$1/.rtrain/attempts/$an aj=$1/.rtrain/attempts.jsonl
  else
    # shellcheck disable=SC2034  # the same
    an='' ad=$1 aj=$1/attempts.jsonl
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_no() {
  attempt_dir "$1"
  if [ -z "$an" ]; then
    an=1
    for an_d in "$1"/attempts/[0-9]*; do [ -d "$an_d" ] && an=$((an + 1)); done
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_begin() {
  ab_d=$1/.rtrain
  mkdir -p "$ab_d/attempts/$2" &&
    printf '%s\n' "$2" > "$ab_d/attempt.tmp" && mv -f "$ab_d/attempt.tmp" "$ab_d/attempt"
}
# shellcheck disable=SC2034  # read by the scripts that source this file
attempt_top='status status.tmp status_attempt stop_requested stopped launch.lock train.pid
  train.ident slurm_job_id submit_unknown submit_error submit_message gpus queued'
fr_list() {
  fr_i=$1 fr_wd=$2 fr_known=$3 fr_limit=$4
  case $fr_wd in /*) ;; *) fr_wd=$(pwd)/$fr_wd;; esac
  printf 'wd\t%s\t%s\n' "$fr_i" "$fr_wd"
  # shellcheck disable=SC2086,SC2012  # KNOWN is run ids split on purpose (no glob characters); newest first needs `ls -t`
  { printf '%s\n' $fr_known; echo /; ls -qt -- "$fr_wd/" 2>/dev/null; } |
    awk -v limit="$fr_limit" '
      !listing {
        if ($0 == "/") listing = 1
        else if (i = index($0, ":")) { k = substr($0, 1, i - 1); known[k] = 1; ends[k] = substr($0, i + 1) }
        else known[$0] = 1
        next }
      !/^[A-Za-z0-9][A-Za-z0-9._-]*$/ || length($0) > 64 { next }
      limit != "" && ++n > limit + 0 { exit }
      !($0 in known) { print; next }
      $0 in ends { print $0 ":" ends[$0] }' | {
  while IFS= read -r fr_n; do
    case $fr_n in *:*)
      fr_e=${fr_n#*:}
      fr_n=${fr_n%%:*}
      fr_r=${fr_e#*:} fr_e=${fr_e%%:*}
      fr_d=$fr_wd/$fr_n
      attempt_no "$fr_d"; fr_a=$an
      # More attempts than recorded: it went on, even when its end mark was written in
      # the very second of the recorded end (times are whole seconds).
      [ "$fr_r" = 0 ] || [ "$fr_r" = "$fr_a" ] || fr_e=went
      fr_f=$fr_d/status; [ -e "$fr_f" ] || fr_f=$fr_d/train.log
      mt_add "end$tab$fr_i$tab$fr_n$tab$fr_e$tab$fr_a$tab" "$fr_f"
      continue;;
    esac
    fr_d=$fr_wd/$fr_n
    [ -d "$fr_d" ] || continue
    [ -e "$fr_d/train.pid" ] || [ -e "$fr_d/status" ] || [ -e "$fr_d/train.log" ] || continue
    for fr_f in config.yaml train.pid train.log status; do
      [ -e "$fr_d/$fr_f" ] && break
    done
    mt_add "run$tab$fr_i$tab$fr_n$tab" "$fr_d/$fr_f"
  done
  mt_flush; } | awk -F "$tab" '$1 != "end" || $4 != $6'
}
fr_list 0 ~/.praisonai-train ' r0:1700000042:0 r1 ' 200
fr_list 1 /data/runs '  ' 200
proc=${RT_PROC:-/proc}
nl='
'
proc_fields() {
  state='' pgrp='' start=''
  if [ -d "$proc/self" ]; then
    read -r pf_line 2>/dev/null < "$proc/$1/stat" || return 1
    pf_rest=${pf_line##*) }
    # shellcheck disable=SC2086  # stat's fields, split on purpose (the name is cut off)
    set -- $pf_rest
    state=$1 pgrp=$3 start=${20}
  else
    pf_line=$(ps -o stat= -o pgid= -p "$1" 2>/dev/null) || return 1
    # shellcheck disable=SC2086  # ps's two fields, split on purpose
    set -- $pf_line
    state=$1 pgrp=$2
  fi
  [ -n "$state" ]
}
boot_id() {
  bi_f=/proc/sys/kernel/random/boot_id
  if [ -n "$RTRAIN_TEST_BOOT_ID_FILE" ] && [ -r "$RTRAIN_TEST_BOOT_ID_FILE" ]; then
    bi_f=$RTRAIN_TEST_BOOT_ID_FILE
  fi
  bi=none; read -r bi 2>/dev/null < "$bi_f"
}
# Read a one-line file into a variable without forking (probes run this per run).
read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
own_groups() {
  proc_fields $$; own_pgrp=$pgrp
  sh_pgrp=$own_pgrp
  if [ -n "$RT_SHELL" ] && proc_fields "$RT_SHELL"; then sh_pgrp=$pgrp; fi
}
# usable PID: a live, non-zombie process that is neither pid 0/1 nor in our own groups.
usable() {
  case $1 in ''|*[!0-9]*|0|1) return 1;; esac
  proc_fields "$1" || return 1
  case $state in Z*|X*|x*) return 1;; esac
  [ "$pgrp" != "$own_pgrp" ] && [ "$pgrp" != "$sh_pgrp" ]
}
# is_live PID IDENT RUNDIR: the run's recorded process, still the same process.
is_live() {
  usable "$1" || return 1
  [ -d "$proc/self" ] || return 0
  if [ -n "$2" ]; then
    boot_id
    [ "$2" = "$start $bi" ]
  else
    # Same directory: compared by physical path, as POSIX `test` has no `-ef`. Only a
    # run without an identity (started by `praisonai train remote`) costs this fork.
    [ -n "$3" ] || return 1
    il_p=$(cd -P -- "$proc/$1/cwd" 2>/dev/null && pwd -P && cd -P -- "$3" 2>/dev/null && pwd -P) &&
      [ "${il_p%%"$nl"*}" = "${il_p#*"$nl"}" ]
  fi
}
# marked_pids TOKEN: every process that carries the run's environment marker.
marked_pids() {
  [ -d "$proc/self" ] || return 0
  case $1 in ''|*[!0-9a-f]*) return 0;; esac
  # shellcheck disable=SC2013  # file names, /proc/N/environ: one word each
  for mp_file in $(grep -l -s -a -z -x -F "RTRAIN_RUN=$1" "$proc"/[0-9]*/environ 2>/dev/null); do
    mp_pid=${mp_file#"$proc"/}; echo "${mp_pid%/environ}"
  done
}
# group_pids GROUP: every process in the process group.
group_pids() {
  if [ -d "$proc/self" ]; then
    for gp_stat in "$proc"/[0-9]*/stat; do
      read -r gp_line 2>/dev/null < "$gp_stat" || continue
      gp_rest=${gp_line##*) }
      # shellcheck disable=SC2086  # stat's fields, split on purpose
      set -- $gp_rest
      [ "$3" = "$GROUP" ] && { gp_pid=${gp_stat#"$proc"/}; echo "${gp_pid%/stat}"; }
    done
  else
    ps -e -o pid= -o pgid= 2>/dev/null | awk -v g="$GROUP" '$2 == g {print $1}'
  fi
}
# run_members RUNDIR: sets `members` to the run's live pids, space-separated. Command
# substitutions have finished (and their processes are reaped) before any candidate is
# checked, so the scan never counts its own helpers.
run_members() {
  read_file "$1/train.pid"; rm_pid=$rf; read_file "$1/train.ident"; rm_ident=$rf
  read_file "$1/train.token"; rm_token=$rf
  rm_all=$(marked_pids "$rm_token")
  if is_live "$rm_pid" "$rm_ident" "$1"; then rm_all="$rm_all $(GROUP=$pgrp; group_pids)"; fi
  live_of "$rm_all"
  # shellcheck disable=SC2034  # the answer, read by the scripts that call this
  members=$live
}
# live_of CANDIDATES: sets `live` to the distinct usable pids among them, never this shell.
live_of() {
  live=
  for lo_m in $1; do
    case " $live " in *" $lo_m "*) continue;; esac
    [ "$lo_m" != "$$" ] && usable "$lo_m" && live="$live $lo_m"
  done
}
# Live marked processes of all runs, gathered once per script (one grep, whatever the
# number of runs) and only when some run needs it.
marks_loaded=
run_marked() {
  case $1 in ''|*[!0-9a-f]*) return 1;; esac
  if [ -z "$marks_loaded" ]; then
    marks_loaded=1
    all_marks=$(grep -h -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' "$proc"/[0-9]*/environ 2>/dev/null | tr '\0' '\n')
  fi
  case "
$all_marks
" in *"
RTRAIN_RUN=$1
"*) return 0;; esac
  return 1
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_dir() {
  if [ -d "$1/.rtrain" ]; then
    an=; [ -r "$1/.rtrain/attempt" ] && read -r an < "$1/.rtrain/attempt"
    # Host text, bounded as attempt_layout.MAX_ATTEMPT: a garbled number is attempt 1.
    case $an in ''|0*|*[!0-9]*|?????*) an=1;; esac
    [ "$an" -le 1000 ] || an=1
    # shellcheck disable=SC2034  # the answer, read by the scripts that call this
    ad=$1/.rtrain/attempts/$an aj=$1/.rtrain/attempts.jsonl
  else
    # shellcheck disable=SC2034  # the same
    an='' ad=$1 aj=$1/attempts.jsonl
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_no() {
  attempt_dir "$1"
  if [ -z "$an" ]; then
    an=1
    for an_d in "$1"/attempts/[0-9]*; do [ -d "$an_d" ] && an=$((an + 1)); done
  fi
}
# shellcheck disable=SC2317  # a library: what a script does not call is not dead code
attempt_begin() {
  ab_d=$1/.rtrain
  mkdir -p "$ab_d/attempts/$2" &&
    printf '%s\n' "$2" > "$ab_d/attempt.tmp" && mv -f "$ab_d/attempt.tmp" "$ab_d/attempt"
}
# shellcheck disable=SC2034  # read by the scripts that source this file
attempt_top='status status.tmp status_attempt stop_requested stopped launch.lock train.pid
  train.ident slurm_job_id submit_unknown submit_error submit_message gpus queued'
tab='	'
mt_nl='
'
mt_list='' mt_part='' mt_n=0 mt_o=''
mt_add() {
  mt_part="$mt_part$1$mt_nl$2$mt_nl" mt_n=$((mt_n + 1))
  case $mt_n in *00|*50) mt_list=$mt_list$mt_part mt_part='';; esac
  [ "$mt_n" -lt 2000 ] || mt_flush
}
mt_flush() { mtimes "$mt_list$mt_part"; mt_list='' mt_part='' mt_n=0; }
mtimes() {
  [ -n "$1" ] || return 0
  if [ -z "$mt_o" ]; then
    if stat -c %Y / >/dev/null 2>&1; then mt_o=-c mt_f='%Y %n'; else mt_o=-f mt_f='%m %N'; fi
  fi
  { printf '%s//\n' "$1"
    printf '%s' "$1" | sed -n 'n;p' | tr '\n' '\000' | xargs -0 stat "$mt_o" "$mt_f" 2>/dev/null
  } | awk '
    !sep && $0 == "//" { sep = 1; next }
    !sep { if (NR % 2) pre[++n] = $0; else path[n] = $0; next }
    { t = $1; sub(/^[^ ]* /, ""); when[$0] = t }
    END { for (i = 1; i <= n; i++) print pre[i] ((path[i] in when) ? when[path[i]] : "") }'
}
own_groups
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
  attempt_dir "$rd"
  rw=; st=; gi=; if [ $alive = 1 ]; then read_file "$ad/retry_wait"; rw=$rf; read_file "$ad/stalled"; st=$rf
    read_file "$ad/gpus_idle"; gi=$rf
  elif [ -n "$code" ] && [ "$code" != 0 ]; then read_file "$ad/retry_gave_up"; rw=$rf
    [ -n "$rw" ] || { read_file "$ad/gave_up"; rw=$rf; }
    if [ "$stop_by" = stall ]; then read_file "$ad/stalled"; st=$rf; read_file "$ad/gpus_idle"; gi=$rf; fi
  fi
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
probe 0 ~/.praisonai-train/r1 0
probe 1 /data/runs/r-2.b 1
mt_flush
gs_id=; gs_b=
read -r gs_id 2>/dev/null < /proc/sys/kernel/hostname; read -r gs_b 2>/dev/null < /proc/sys/kernel/random/boot_id
gs_id=$gs_id-$gs_b
case $gs_id in -*|*-|*[!A-Za-z0-9._-]*) gs_id=;; esac
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smi=missing"
elif [ -z "$gs_id" ] || [ ! -r /proc/uptime ] || [ -z "$HOME" ] || ! { gs_d=$HOME/.cache/rtrain-tui
    # shellcheck disable=SC2174  # ~/.cache, if new, is the user's ordinary directory
    [ -d "$gs_d" ] || mkdir -p -m 700 "$gs_d" 2>/dev/null; }; then
if command -v nvidia-smi >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then gs_t="timeout 5"; else gs_t=; fi
  gs_out=$( { $gs_t nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total \
      --format=csv,noheader,nounits 2>&1; gs_rc=$?; echo "rt_smi_rc=$gs_rc"
    [ $gs_rc = 0 ] && $gs_t nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory \
      --format=csv,noheader,nounits 2>/dev/null; } |
    awk 'function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
      /^rt_smi_rc=[0-9]+$/ && !apps { print "gpu_smi=" substr($0, 11); apps = 1; next }
      !apps { if (++n <= 65) print "gpu=" substr($0, 1, 512); next }
      ++m <= 257 {
        split(substr($0, 1, 512), a, ","); pid = trim(a[2]); pg = ""; user = ""
        if (pid ~ /^[0-9]+$/ && length(pid) < 12) {
          f = "/proc/" pid "/stat"
          if ((getline l < f) > 0) { sub(/.*\) /, "", l); split(l, s, " "); pg = s[3] }
          close(f); f = "/proc/" pid "/status"
          while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, s, /[ \t]+/); user = s[2]; break }
          close(f)
          if (user != "") {
            if (!pw) { pw = 1; while ((getline l < "/etc/passwd") > 0) { split(l, s, ":"); name[s[3]] = s[1] } }
            if (user in name) user = name[user]; else user = "uid " user
          }
          envs = envs " /proc/" pid "/environ"
        } else pid = ""
        gsub(/,/, "", user)
        print "gpu_app=" trim(a[1]) "," pid "," trim(a[3]) "," pg "," substr(user, 1, 64)
      }
      END { if (envs != "") print "gpu_envs=" envs }')
  printf '%s\n' "$gs_out"
  # Only awk's last line starts with `gpu_envs=` (every host row got a prefix), and it
  # holds /proc/DIGITS/environ words only: safe to split unquoted.
  case $gs_out in
    *"
gpu_envs= /proc/"*)
    # shellcheck disable=SC2086  # words split on purpose (see above)
    grep -H -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' -- ${gs_out##*"
gpu_envs="} 2>/dev/null | tr '\0' '\n';;
  esac
else
  echo "gpu_smi=missing"
fi
else
  read -r gs_now _ < /proc/uptime; gs_now=${gs_now%.*}
  gs_f=$gs_d/gpu-sample-$gs_id
  echo "gpu_now=$gs_now"
  if [ -r "$gs_f" ]; then while IFS= read -r gs_l; do printf '%s\n' "$gs_l"; done < "$gs_f"; fi
  if [ -r "$gs_f.lock" ]; then
    gs_then=; read -r gs_then < "$gs_f.lock"
    case $gs_then in ''|*[!0-9]*) gs_then=0;; esac
    # Dead sampler: older than 30 s (its nvidia-smi calls are bounded by `timeout 5`;
    # without timeout(1) a hung one may still live: 600 s, so they never pile up), or
    # from before a reboot.
    gs_stale=30; command -v timeout >/dev/null 2>&1 || gs_stale=600
    if [ $((gs_now - gs_then)) -gt $gs_stale ] || [ "$gs_now" -lt "$gs_then" ]; then rm -f "$gs_f.lock"; fi
  fi
  set -C
  if { echo "$gs_now" > "$gs_f.lock"; } 2>/dev/null; then
    set +C
    {
      { read -r gs_up _ < /proc/uptime; echo "gpu_uptime=${gs_up%.*}"
if command -v nvidia-smi >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then gs_t="timeout 5"; else gs_t=; fi
  gs_out=$( { $gs_t nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total \
      --format=csv,noheader,nounits 2>&1; gs_rc=$?; echo "rt_smi_rc=$gs_rc"
    [ $gs_rc = 0 ] && $gs_t nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory \
      --format=csv,noheader,nounits 2>/dev/null; } |
    awk 'function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
      /^rt_smi_rc=[0-9]+$/ && !apps { print "gpu_smi=" substr($0, 11); apps = 1; next }
      !apps { if (++n <= 65) print "gpu=" substr($0, 1, 512); next }
      ++m <= 257 {
        split(substr($0, 1, 512), a, ","); pid = trim(a[2]); pg = ""; user = ""
        if (pid ~ /^[0-9]+$/ && length(pid) < 12) {
          f = "/proc/" pid "/stat"
          if ((getline l < f) > 0) { sub(/.*\) /, "", l); split(l, s, " "); pg = s[3] }
          close(f); f = "/proc/" pid "/status"
          while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, s, /[ \t]+/); user = s[2]; break }
          close(f)
          if (user != "") {
            if (!pw) { pw = 1; while ((getline l < "/etc/passwd") > 0) { split(l, s, ":"); name[s[3]] = s[1] } }
            if (user in name) user = name[user]; else user = "uid " user
          }
          envs = envs " /proc/" pid "/environ"
        } else pid = ""
        gsub(/,/, "", user)
        print "gpu_app=" trim(a[1]) "," pid "," trim(a[3]) "," pg "," substr(user, 1, 64)
      }
      END { if (envs != "") print "gpu_envs=" envs }')
  printf '%s\n' "$gs_out"
  # Only awk's last line starts with `gpu_envs=` (every host row got a prefix), and it
  # holds /proc/DIGITS/environ words only: safe to split unquoted.
  case $gs_out in
    *"
gpu_envs= /proc/"*)
    # shellcheck disable=SC2086  # words split on purpose (see above)
    grep -H -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' -- ${gs_out##*"
gpu_envs="} 2>/dev/null | tr '\0' '\n';;
  esac
else
  echo "gpu_smi=missing"
fi
      } > "$gs_f.tmp" && mv -f "$gs_f.tmp" "$gs_f"
      rm -f "$gs_f.lock"
    } </dev/null >/dev/null 2>&1 &
  fi
  set +C
fi
