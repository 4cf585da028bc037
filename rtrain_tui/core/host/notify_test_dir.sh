## `notify test HOST`, from the host itself, by the path a run's end takes (notify_send.sh,
## core/notify/host_send.py): a scratch dir under the workdir ($wd), where the client then
## writes notify.pyz over SFTP (notify_test_send.sh runs it, its settings on stdin).
## Prints `dir=PATH` (a dot name: never read as a run), or `error=...`. Needs $wd.
## Scratch dirs of an hour ago are a killed test's (a test is bounded to 2 min): removed.
mkdir -p "$wd" 2>/dev/null
find "$wd" -maxdepth 1 -name '.notify-test.*' -mmin +60 -exec rm -rf {} + 2>/dev/null
nt_d=$(mktemp -d "$wd/.notify-test.XXXXXX") || { echo "error=cannot make a scratch dir in $wd"; exit 0; }
printf 'dir=%s\n' "$nt_d"
