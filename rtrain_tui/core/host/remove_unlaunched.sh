## Remove a run dir this start made and never launched. Needs $rd, $tok, attempt.sh. A
## resumed run's directory (past its first attempt) holds the attempts before: it is
## kept, and says so (`removed=kept`: an attempt claimed but never launched, which a
## resume can take again).
rf=; [ -r "$rd/train.token" ] && read -r rf < "$rd/train.token"
if [ ! -d "$rd" ]; then echo removed=gone
elif [ "$rf" = "$tok" ] && [ ! -e "$rd/launch.lock" ] && [ ! -e "$rd/train.pid" ]; then
  attempt_no "$rd"
  if [ "$an" != 1 ] || [ -d "$rd/attempts" ]; then echo removed=kept; else rm -rf -- "$rd" && echo removed=1; fi
else echo removed=0; fi
