## Before shipping a dataset into the store $d: make it, drop stale parts, print
## `free_kb=N` and `same=NAME` per stored dataset of exactly $size bytes. Temporary files
## older than a day are left by killed uploads; only our own, by their exact names: the
## store's `.up-*.part` and a run dir's `config.yaml.part`, `run.sh.part`, `notify.pyz.part`
## and `notify.json.part` (tokens: after 10 minutes).
## $c (may be empty) holds the stored datasets' chunk manifests (delta uploads): one whose
## dataset is gone is removed here, so none outlives its dataset by more than one upload;
## `manifests=N` counts those left (none: a delta is not worth chunking the file first).
## A dataset that cannot fit makes nothing: a start sends it while its preflight (which
## refuses such a start) is still under way, and a refused start leaves nothing behind;
## its `same=` lines are still said (a stored copy needs no room).
e=$d
while [ ! -d "$e" ]; do e=$(dirname "$e"); done
free=$(df -Pk "$e" 2>/dev/null | awk 'NR==2 {print $4}')
echo "free_kb=$free"
# Said even when it cannot fit: a stored twin may be this very dataset, which a link
# places with no room at all.
[ ! -d "$d" ] || find "$d" -maxdepth 1 -type f ! -name '*.part' -size "${size}c" 2>/dev/null |
  sed 's|.*/|same=|'
case $free in
  '' | *[!0-9]*) ;;
  *) [ "$((free * 1024))" -lt "$size" ] && exit 0;;
esac
# The workdir is made private here too, as make_run_dir.sh makes it: this may be the
# first thing a start creates on the host.
# shellcheck disable=SC2174  # only the workdir and the store are made private, not their parents
{ mkdir -p -m 700 "${d%/*}/" && mkdir -p -m 700 "$d"; } || exit 1
find "$d" -maxdepth 1 -type f -name '.up-*.part' -mmin +1440 -exec rm -f {} + 2>/dev/null
find "$d/.." -mindepth 2 -maxdepth 2 -type f \( -name config.yaml.part -o -name run.sh.part \
  -o -name notify.pyz.part \) -mmin +1440 -exec rm -f {} + 2>/dev/null
# A killed start's notify.json.part holds webhook tokens: gone after 10 minutes, not a day
# (its write takes milliseconds; one under way now is younger).
find "$d/.." -mindepth 2 -maxdepth 2 -type f -name notify.json.part -mmin +10 -exec rm -f {} + 2>/dev/null
n=0
if [ -n "$c" ] && [ -d "$c" ]; then
  find "$c" -maxdepth 1 -type f -name '.m-*.part' -mmin +1440 -exec rm -f {} + 2>/dev/null
  for m in "$c"/*; do
    [ -f "$m" ] || continue
    if [ -f "$d/${m##*/}" ]; then n=$((n + 1)); else rm -f "$m"; fi
  done
fi
echo "manifests=$n"
