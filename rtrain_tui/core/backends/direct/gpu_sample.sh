## One GPU sample: two nvidia-smi queries in one pipeline and one awk, so no extra round
## trip and few forks. awk bounds what is passed on (65 GPU rows of 512 bytes, 257
## processes), as the preflight does, and resolves each GPU process's group and user from
## /proc and /etc/passwd itself (no `ps`, no fork per process). Our runs' processes are
## told by their RTRAIN_RUN marker: one grep over just those processes' environ files.
## Lines:
##   gpu=INDEX, UUID, UTIL, MEM_USED, MEM_TOTAL   (nvidia-smi's own row, bounded)
##   gpu_smi=RC | missing                          (124: timed out)
##   gpu_app=UUID,PID,USED_MIB,PGID,USER           (fields empty where unknown)
##   /proc/PID/environ:RTRAIN_RUN=TOKEN            (our run's marker on a GPU process)
if command -v nvidia-smi >/dev/null 2>&1; then
  if command -v timeout >/dev/null 2>&1; then gs_t="timeout 5"; else gs_t=; fi
  gs_out=$( { $gs_t nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total \
      --format=csv,noheader,nounits 2>&1; gs_rc=$?; echo "rt_smi_rc=$gs_rc"
    [ $gs_rc = 0 ] && $gs_t nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory \
      --format=csv,noheader,nounits 2>/dev/null; } |
    awk 'function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
      /^rt_smi_rc=[0-9]+$/ && !apps { print "gpu_smi=" substr($0, 11); apps = 1; next }
      !apps { if (++n <= 65) print "gpu=" substr($0, 1, 512); next }
      ++m <= 257 {
        split(substr($0, 1, 512), a, ","); pid = trim(a[2]); pg = ""; user = ""
        if (pid ~ /^[0-9]+$/ && length(pid) < 12) {
          f = "/proc/" pid "/stat"
          if ((getline l < f) > 0) { sub(/.*\) /, "", l); split(l, s, " "); pg = s[3] }
          close(f); f = "/proc/" pid "/status"
          while ((getline l < f) > 0) if (l ~ /^Uid:/) { split(l, s, /[ \t]+/); user = s[2]; break }
          close(f)
          if (user != "") {
            if (!pw) { pw = 1; while ((getline l < "/etc/passwd") > 0) { split(l, s, ":"); name[s[3]] = s[1] } }
            if (user in name) user = name[user]; else user = "uid " user
          }
          envs = envs " /proc/" pid "/environ"
        } else pid = ""
        gsub(/,/, "", user)
        print "gpu_app=" trim(a[1]) "," pid "," trim(a[3]) "," pg "," substr(user, 1, 64)
      }
      END { if (envs != "") print "gpu_envs=" envs }')
  printf '%s\n' "$gs_out"
  # Only awk's last line starts with `gpu_envs=` (every host row got a prefix), and it
  # holds /proc/DIGITS/environ words only: safe to split unquoted.
  case $gs_out in
    *"
gpu_envs= /proc/"*)
    # shellcheck disable=SC2086  # words split on purpose (see above)
    grep -H -s -a -z -o -x 'RTRAIN_RUN=[0-9a-f]*' -- ${gs_out##*"
gpu_envs="} 2>/dev/null | tr '\0' '\n';;
  esac
else
  echo "gpu_smi=missing"
fi
