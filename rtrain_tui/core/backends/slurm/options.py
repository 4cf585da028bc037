"""What a Slurm start may ask the scheduler for, checked before anything reaches a host.

The record and its checks (`SlurmOptions`, `check_sbatch_arg`) live in
core/safety/slurm_options.py, below both this backend and config.toml's reader (which
holds a host's Slurm defaults as one); here: what the batch script's trainer needs of them.
"""

from __future__ import annotations

from rtrain_tui.core.safety.slurm_options import SlurmOptions, check_sbatch_arg

__all__ = ["MASTER_PORT", "MULTI_NODE_TRAINER", "SlurmOptions", "check_sbatch_arg", "trainer_values"]

MASTER_PORT = 29500  # torchrun's default rendezvous port on the first node


# -- run.sbatch ---------------------------------------------------------------------------
def trainer_values(nodes: int) -> dict[str, str]:
    """Template values for the multi-node fields, as shell words evaluated on each node.

    One node: plain numbers and the loopback address, like a box. Several: the values
    Slurm gives each task (`SLURM_NODEID` differs per node), read inside `srun`'s shell.
    """
    if nodes <= 1:
        return {"nodes": "1", "node_rank": "0", "master_addr": "127.0.0.1",
                "master_port": str(MASTER_PORT)}
    return {"nodes": '"$SLURM_NNODES"', "node_rank": '"$SLURM_NODEID"',
            "master_addr": '"$MASTER_ADDR"', "master_port": '"$MASTER_PORT"'}


# The default command for several nodes: one torchrun per node, rendezvous on the first.
MULTI_NODE_TRAINER = ("{python} -m torch.distributed.run --nnodes {nodes} --node_rank {node_rank} "
                      "--nproc_per_node {gpus} --rdzv_backend c10d "
                      "--rdzv_endpoint {master_addr}:{master_port} "
                      "-m praisonai_train llm {dataset} --config {config}")
