## Print `state=STATE` of the run's job ('' when Slurm no longer knows it). Needs $rd,
## $job_at (a job a stop found, asked about instead; may be empty).
job=$job_at; [ -n "$job" ] || { [ -r "$rd/slurm_job_id" ] && read -r job < "$rd/slurm_job_id"; }
case $job in ''|*[!0-9_]*) echo state=; exit 0;; esac
st=$(squeue -h -t all -j "$job" -o '%T' 2>/dev/null)
[ -n "$st" ] || st=$(scontrol -o show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
echo "state=$st"
