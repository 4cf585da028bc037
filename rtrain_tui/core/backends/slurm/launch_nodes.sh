## Several nodes: `srun` starts one launcher per node, each running the trainer's command
## ($rt_trainer) in its own `sh -c`; the first host of the allocation is the rendezvous
## point. `#@ trainer` sets $rt_trainer; needs $rt_port.
# shellcheck disable=SC2088,SC2016  # the trainer's command is sh -c's: its `~` and `$SLURM_...` expand there, per node
#@ trainer
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-$rt_port}
export MASTER_ADDR MASTER_PORT
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c "$rt_trainer" < /dev/null &
