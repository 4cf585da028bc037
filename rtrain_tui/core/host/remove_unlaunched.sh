## Remove a run dir this start made and never launched. Needs $rd, $tok. A resumed
## run's directory (it has attempts/) holds the attempts before: never removed.
rf=; [ -r "$rd/train.token" ] && read -r rf < "$rd/train.token"
if [ ! -d "$rd" ]; then echo removed=gone
elif [ "$rf" = "$tok" ] && [ ! -e "$rd/launch.lock" ] && [ ! -e "$rd/train.pid" ] &&
     [ ! -d "$rd/attempts" ]; then
  rm -rf -- "$rd" && echo removed=1
else echo removed=0; fi
