## `fr_list I WORKDIR KNOWN LIMIT`: print `wd<TAB>I<TAB>ABSOLUTE WORKDIR`, then
## `run<TAB>I<TAB>NAME<TAB>EPOCH` for each directory in it that holds what a run leaves
## and whose name can be a run id and is not in KNOWN (` id id:END `). A known name
## given with its END (an ended run's recorded end, epoch seconds) prints
## `end<TAB>I<TAB>NAME<TAB>END<TAB>ATTEMPT<TAB>EPOCH` when its end mark (`status`, else
## `train.log`: what the probes read its end from, so host time against host time)
## was last written at another EPOCH (empty: none left): the run went on after that
## end (a resume, maybe from another laptop, or the host's own retry); ATTEMPT is how
## many attempts it has had. With LIMIT (else empty), only the newest LIMIT such names
## are looked at (a run dir's mtime moves when a resume or retry files its attempt).
## Variables are prefixed `fr_` so the listing can precede another probe script in one
## round trip. The times are read for all the runs of a workdir at once (`mt_add`,
## needs mtimes.sh; and attempt.sh): a `date` per run cost ~5 s of a listing of 5,000.
fr_list() {
  fr_i=$1 fr_wd=$2 fr_known=$3 fr_limit=$4
  case $fr_wd in /*) ;; *) fr_wd=$(pwd)/$fr_wd;; esac
  printf 'wd\t%s\t%s\n' "$fr_i" "$fr_wd"
  ## The known names, a `/` (no name), then the listing newest first: one awk keeps the
  ## names that can be run ids (`ls -q` turns a newline into `?`), counts them against
  ## LIMIT and passes on those not known. A `case` per name against KNOWN scanned the
  ## whole list each time: 1.7 s of dash (3 s of bash) for a workdir of 5,000 known runs.
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
      ## A known run that had ended: has it gone on since? (filtered after mt_flush)
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
