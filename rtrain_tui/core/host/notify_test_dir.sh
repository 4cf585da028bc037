## `notify test HOST`, from the host itself, by the path a run's end takes (notify_send.sh,
## core/notify/host_send.py): a scratch dir under the workdir ($wd), where the client then
## writes notify.pyz and notify.json (0600) over SFTP (notify_test_send.sh runs it).
## Prints `dir=PATH` (a dot name: never read as a run), or `error=...`. Needs $wd.
mkdir -p "$wd" 2>/dev/null
nt_d=$(mktemp -d "$wd/.notify-test.XXXXXX") || { echo "error=cannot make a scratch dir in $wd"; exit 0; }
printf 'dir=%s\n' "$nt_d"
