## Facts about a login node, after python_facts.sh and disk_free.sh (which set $T):
## whether sbatch is there, Slurm's partitions and nodes, and our jobs.
if command -v sbatch >/dev/null 2>&1; then echo sbatch=yes; else echo sbatch=no; exit 0; fi
$T sinfo -h -N -O 'Partition:|,NodeList:|,StateLong:|,Gres:|,GresUsed:|' 2>&1 | head -n 500 | sed 's/^/node=/'
$T squeue -h -u "$(id -un)" -O 'JobID:|,Partition:|,State:|,Reason:|,Name:|' 2>/dev/null | head -n 200 | sed 's/^/job=/'
