## `fr_list I WORKDIR KNOWN LIMIT`: print `wd<TAB>I<TAB>ABSOLUTE WORKDIR`, then
## `run<TAB>I<TAB>NAME<TAB>EPOCH` for each directory in it that holds what a run leaves
## and whose name can be a run id and is not in KNOWN (` id id `). With LIMIT (else
## empty), only the newest LIMIT such names are looked at. Variables are prefixed `fr_`
## so the listing can precede another probe script in one round trip. The start times
## are read for all the runs of a workdir at once (`mt_add`, needs mtimes.sh): a
## `date` per run cost ~5 s of a listing of 5,000.
fr_list() {
  fr_i=$1 fr_wd=$2 fr_known=$3 fr_limit=$4
  case $fr_wd in /*) ;; *) fr_wd=$(pwd)/$fr_wd;; esac
  printf 'wd\t%s\t%s\n' "$fr_i" "$fr_wd"
  # shellcheck disable=SC2012  # newest first needs `ls -t`; -q and the case below keep names to one safe line
  ls -qt -- "$fr_wd/" 2>/dev/null | {
  fr_c=0
  while IFS= read -r fr_n; do
    case $fr_n in ""|[!A-Za-z0-9]*|*[!A-Za-z0-9._-]*) continue;; esac
    [ ${#fr_n} -le 64 ] || continue
    if [ -n "$fr_limit" ]; then fr_c=$((fr_c + 1)); [ $fr_c -le "$fr_limit" ] || break; fi
    case $fr_known in *" $fr_n "*) continue;; esac
    fr_d=$fr_wd/$fr_n
    [ -d "$fr_d" ] || continue
    [ -e "$fr_d/train.pid" ] || [ -e "$fr_d/status" ] || [ -e "$fr_d/train.log" ] || continue
    for fr_f in config.yaml train.pid train.log status; do
      [ -e "$fr_d/$fr_f" ] && break
    done
    mt_add "run$tab$fr_i$tab$fr_n$tab" "$fr_d/$fr_f"
  done
  mt_flush; }
}
