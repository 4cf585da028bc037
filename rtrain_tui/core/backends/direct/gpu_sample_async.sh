## The refresh probe's GPU part. nvidia-smi itself takes 10-50 ms on a real host (more
## without persistence mode), and the pipeline around it a few forks: too much for a probe
## that runs every 2 s per host. So the probe prints the last sample, taken in the
## background, and starts the next one: it costs a file read with builtins and one fork
## it does not wait for. Samples live in ~/.cache/rtrain-tui (0700). Each carries the
## host's uptime when it was taken (`gpu_uptime=`) and the probe says the uptime now
## (`gpu_now=`), so the client dates it without trusting either clock. A lock holding the
## uptime it was taken at keeps one sampler at a time; one older than 30 s is a dead
## sampler's and is broken. Hosts without /proc/uptime, or where ~/.cache cannot be
## written, are sampled in the probe itself (slower, but never blind). The sample file is
## named by the host's name and boot id: hosts that share one home (NFS) must never read
## each other's GPUs, nor one host a sample from before its reboot. A host whose name or
## boot id cannot be read (or holds odd characters) is sampled in the probe too.
## `#@ sample` is gpu_sample.sh.
gs_id=; gs_b=
read -r gs_id 2>/dev/null < /proc/sys/kernel/hostname; read -r gs_b 2>/dev/null < /proc/sys/kernel/random/boot_id
gs_id=$gs_id-$gs_b
case $gs_id in -*|*-|*[!A-Za-z0-9._-]*) gs_id=;; esac
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smi=missing"
elif [ -z "$gs_id" ] || [ ! -r /proc/uptime ] || [ -z "$HOME" ] || ! { gs_d=$HOME/.cache/rtrain-tui
    # shellcheck disable=SC2174  # ~/.cache, if new, is the user's ordinary directory
    [ -d "$gs_d" ] || mkdir -p -m 700 "$gs_d" 2>/dev/null; }; then
#@ sample
else
  read -r gs_now _ < /proc/uptime; gs_now=${gs_now%.*}
  gs_f=$gs_d/gpu-sample-$gs_id
  echo "gpu_now=$gs_now"
  if [ -r "$gs_f" ]; then while IFS= read -r gs_l; do printf '%s\n' "$gs_l"; done < "$gs_f"; fi
  if [ -r "$gs_f.lock" ]; then
    gs_then=; read -r gs_then < "$gs_f.lock"
    case $gs_then in ''|*[!0-9]*) gs_then=0;; esac
    # Dead sampler: older than 30 s (its nvidia-smi calls are bounded by `timeout 5`;
    # without timeout(1) a hung one may still live: 600 s, so they never pile up), or
    # from before a reboot.
    gs_stale=30; command -v timeout >/dev/null 2>&1 || gs_stale=600
    if [ $((gs_now - gs_then)) -gt $gs_stale ] || [ "$gs_now" -lt "$gs_then" ]; then rm -f "$gs_f.lock"; fi
  fi
  set -C
  if { echo "$gs_now" > "$gs_f.lock"; } 2>/dev/null; then
    set +C
    {
      { read -r gs_up _ < /proc/uptime; echo "gpu_uptime=${gs_up%.*}"
#@ sample
      } > "$gs_f.tmp" && mv -f "$gs_f.tmp" "$gs_f"
      rm -f "$gs_f.lock"
    } </dev/null >/dev/null 2>&1 &
  fi
  set +C
fi
