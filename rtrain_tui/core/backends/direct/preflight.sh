## Key=value facts about a box: python, trainer, GPUs, disk, setsid. Needs $wd.
echo "os=$(uname -s 2>/dev/null)"
#@ python_facts
if command -v nvidia-smi >/dev/null 2>&1; then
  # At most 65 rows of 512 bytes are passed on (65 > MAX_GPUS marks it malformed): a
  # broken driver printing 400,000 lines must not flood the connection or the client.
  { $T nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu \
       --format=csv,noheader,nounits 2>&1; echo "rt_smi_rc=$?"; } |
    awk '/^rt_smi_rc=[0-9]+$/ { print "nvidia_smi=" substr($0, 11); next }
         ++n <= 65 { print "gpu=" substr($0, 1, 512) }'
else
  echo "nvidia_smi=missing"
fi
#@ disk_free
if command -v setsid >/dev/null 2>&1; then echo setsid=yes; else echo setsid=no; fi
if command -v sbatch >/dev/null 2>&1; then echo sbatch=yes; fi
