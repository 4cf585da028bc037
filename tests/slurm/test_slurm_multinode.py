"""A real 2-node job: partition `multi` has two slurmd nodes (n1, n2) on this machine."""

from __future__ import annotations

from pathlib import Path

from rtrain_tui.core.runs.index import RunIndex
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli


def test_two_nodes_each_get_their_rank_and_meet_at_the_first_node(scli: SlurmCli, tmp_path: Path,
                                                                  workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=2)
    # Each node's launcher records what it was given, then runs the (stand-in) trainer.
    trainer = ("sh -c 'echo rank=$1 nodes=$2 master=$3 >> ranks.txt' x {node_rank} {nodes} "
               "{master_addr}:{master_port} && {python} -m praisonai_train llm --config {config}")
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", "pair",
             "--partition", "multi", "--nodes", "2", "--gpus", "1", "--trainer", trainer,
             timeout=120)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-1] == f"pair on {LOGIN}: completed"
    run_dir = Path(workdir) / "pair"
    assert sorted((run_dir / "ranks.txt").read_text().splitlines()) == [
        "rank=0 nodes=2 master=n1:29500", "rank=1 nodes=2 master=n1:29500"]
    script = (run_dir / "run.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --partition=multi" in script
    assert 'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1' in script
    assert (run_dir / "train.log").read_text().count("'step': 2") == 2  # both nodes trained
    # The index knows it held a GPU on each of two nodes: what a per-GPU-hour price counts.
    record = RunIndex(scli.index).get(LOGIN, "pair")
    assert record is not None and (record.nodes, record.gpus) == (2, 1)
