## Print the absolute workdir, as the remote shell expands it: needs $wd.
case $wd in /*) ;; *) wd=$(pwd)/$wd;; esac
printf "%s\n" "$wd"
