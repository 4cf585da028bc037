## Free space where the workdir is (or its nearest existing parent): needs $wd.
d=$wd
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "disk_free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}')"
