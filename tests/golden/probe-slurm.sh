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
su_start() {
  su_st='' su_z=''
  read -r su_l 2>/dev/null < "/proc/$1/stat" || return 0
  su_l=${su_l##*) }
  # shellcheck disable=SC2086  # stat's fields, split on purpose (the name is cut off)
  set -- $su_l
  su_z=$1 su_st=${20}
}
submit_mark() {
  su_start "$1"
  printf '%s %s\n' "$1" "$su_st" > submitting.tmp && mv -f submitting.tmp submitting
}
submit_under_way() {
  [ -e "$1/submitting" ] || return 1
  { [ -s "$1/slurm_job_id" ] || [ -s "$1/submit_error" ] || [ -s "$1/submit_unknown" ]; } && return 1
  su_p='' su_w=''
  read -r su_p su_w 2>/dev/null < "$1/submitting"
  case $su_p in ''|*[!0-9]*|0|1) return 1;; esac
  kill -0 "$su_p" 2>/dev/null || return 1
  su_start "$su_p"
  case $su_z in Z*|X*|x*) return 1;; esac
  [ "$su_st" = "$su_w" ]
}
read_file() { rf=; [ -r "$1" ] && read -r rf < "$1"; }
ids=
probe() {
  rd=$2
  if [ ! -d "$rd" ]; then printf '%s\texists=0\n' "$1"; return; fi
  read_file "$rd/slurm_job_id"; job=$rf
  case $job in ''|*[!0-9_]*) job=;; *) ids="$ids${ids:+,}$job";; esac
  read_file "$rd/status"; code=$rf
  read_file "$rd/status_attempt"; attempt=$rf
  attempt_dir "$rd"
  rw=; if [ -z "$code" ]; then read_file "$ad/retry_wait"; rw=$rf
  elif [ "$code" != 0 ]; then read_file "$ad/retry_gave_up"; rw=$rf; fi
  read_file "$rd/stop_requested"; stop=0; [ -n "$rf" ] && stop=1; stop_by=$rf
  st=; gi=; if [ "$stop_by" = stall ] || { [ -z "$code" ] && [ "$stop" = 0 ]; }; then
    read_file "$ad/stalled"; st=$rf; read_file "$ad/gpus_idle"; gi=$rf; fi
  stopped=0; [ -e "$rd/stopped" ] && stopped=1
  launched=0; [ -e "$rd/launch.lock" ] && launched=1
  unknown=0; [ -s "$rd/submit_unknown" ] && unknown=1
  sub=0; if [ -z "$job" ] && [ $launched = 1 ] && submit_under_way "$rd"; then sub=1; fi
  if [ "$3" = 1 ] && [ -n "$job$code" ]; then
    ef="$rd/status"; [ -e "$ef" ] || ef="$rd/train.log"
    [ -e "$ef" ] && mt_add "$1${tab}ended=" "$ef"
  fi
  read_file "$rd/running_since"  # `ATTEMPT EPOCH`: when the job left Slurm's queue
  [ -n "$rf" ] && printf '%s\trunning_since=%s\n' "$1" "$rf"
  printf '%s\texists=1\tjob=%s\tcode=%s\tattempt=%s\tstop=%s\tstopped=%s\tlaunched=%s\tunknown=%s\tsubmitting=%s\tretry=%s\tstalled=%s\tgpus_idle=%s\n' \
    "$1" "$job" "$code" "$attempt" "$stop" "$stopped" "$launched" "$unknown" "$sub" "$rw" "$st" "$gi"
}
probe 0 ~/.praisonai-train/r1 0
probe 1 /data/runs/r2 1
mt_flush
[ -n "$ids" ] || exit 0
sq=$(squeue -h -t all -j "$ids" -O 'JobID:|,State:|,Reason:|,exit_code:|,RestartCnt:|' 2>/dev/null)
printf '%s\n' "$sq" | sed -n 's/^\([0-9]\)/J	\1/p'
case $sq in *'|PENDING|'*)
  # Our waiting jobs' places in their partition's queue, in Slurm's priority order
  # (every user's pending jobs; bounded): `Q<TAB>ID|PLACE`.
  squeue -h -t PD --sort=-p,i -O 'JobID:|,Partition:|' 2>/dev/null | head -n 20000 |
    awk -F'|' -v ids=",$ids," '{ n[$2]++ } index(ids, "," $1 ",") { print "Q\t" $1 "|" n[$2] }'
esac
oldifs=$IFS; IFS=,
for id in $ids; do
  case "
$sq" in *"
$id|"*) continue;; esac
  out=$(scontrol -o show job "$id" 2>/dev/null) && printf 'C\t%s\n' "$out"
  missing="$missing${missing:+,}$id"
done
IFS=$oldifs
if [ -n "$missing" ]; then
  sacct -n -P -X -j "$missing" -o JobID,State,ExitCode 2>/dev/null | sed 's/^/A	/'
fi
