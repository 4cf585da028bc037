"""A real one-machine Slurm cluster for tests: munged, slurmctld and slurmd as root.

Facts this follows were measured on these machines (see the project's SLURM-NOTES):
- munged's socket must sit under directories everyone can traverse, so the cluster
  lives in `tempfile.mkdtemp(dir="/tmp")` made 0755, never under pytest's 0700 tmp.
- two fake GPUs are GRES files that are symlinks to /dev/null (`Count=` alone drains
  the node, regular files are refused).
- `proctrack/pgid` (linuxproc leaves job processes behind), `KillWait=2` so a stop's
  TERM→KILL step is short, `MinJobAge=300` so ended jobs stay visible to squeue.
- every daemon and client finds the cluster by `SLURM_CONF`; the login node's sshd
  gets it with `SetEnv`.
- `cred_expire=20` (default 120 s): a requeued job waits that long before it may start
  again, and the requeue test waits for its second attempt.
- `JobSubmitPlugins=lua` with a `job_submit.lua` beside slurm.conf (where slurmctld looks
  for it) that tells every submitter a line on stderr, as many real clusters do.
Teardown cancels the jobs first, then ends the daemons by the pids started here, then
any leftover `slurmstepd` that carries this cluster's SLURM_CONF in its environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.sshd import free_port

PACKAGES = "slurmctld slurmd slurm-client munge"
NODE_CPUS = 16  # more than the machine has (config_overrides): CPUs never gate a test job
GPUS = 2
# Partition `multi`: two more nodes of one GPU each, for real 2-node jobs. Several slurmd
# on one machine work here (each node its own port, spool, pid and log file via %n).
MULTI_NODES = ("n1", "n2")
# No node may be *named* like another's NodeHostname (all are `localhost`): slurmctld
# would call that a duplicate. Hence `node0`, not `localhost`.
NODES = ("node0", *MULTI_NODES)
# What the cluster says to every `sbatch` on stderr, as real clusters' job_submit.lua
# do (`slurm.log_user`): sbatch prints it as `sbatch: NOTICE`, stdout keeps the job id.
SUBMIT_NOTICE = "rtraintest: job accepted, 12 GPU-hours left this month"


def missing_binaries() -> list[str]:
    names = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol",
             "scancel", "sinfo")
    return [n for n in names if not (shutil.which(n) or os.path.exists(f"/usr/sbin/{n}"))]


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ssh_config: Path | None = None  # the test hosts' ssh config plus the login node

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def client(self, *args: str, timeout: float = 15) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        p = subprocess.run(list(args), capture_output=True, text=True, env=self.env(),
                           timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    def job_ids(self) -> list[str]:
        return self.client("squeue", "-h", "-o", "%i").split()

    def live_job_ids(self) -> list[str]:
        return self.client("squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i").split()

    def cancel_all(self, wait: float = 10.0) -> None:
        """Cancel every job of this cluster and wait until none is pending or running."""
        ids = self.live_job_ids()
        if ids:
            subprocess.run(["scancel", *ids], env=self.env(), capture_output=True, timeout=15)
        deadline = time.monotonic() + wait
        while self.live_job_ids() and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        try:
            self.cancel_all()
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            pass
        for name in (*(f"slurmd-{n}" for n in NODES), "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self._kill_leftover_steps()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_steps(self) -> None:
        # slurmstepd outlives slurmd; ours carry this cluster's SLURM_CONF. Only those.
        mark = f"SLURM_CONF={self.conf}".encode()
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                pid = int(environ.parent.name)
                if pid > 1 and mark in environ.read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass


def start_cluster() -> SlurmCluster:
    missing = missing_binaries()
    if missing:
        raise RuntimeError(f"Slurm is not installed (missing {', '.join(missing)}): "
                           f"apt-get install -y --no-install-recommends {PACKAGES}")
    root = Path(tempfile.mkdtemp(prefix="rtrain-slurm-", dir="/tmp"))
    root.chmod(0o755)  # munged refuses a socket under a directory others cannot traverse
    cluster = SlurmCluster(root, root / "slurm.conf")
    try:
        _configure(root)
        _start_munge(cluster)
        _start_slurm(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _configure(root: Path) -> None:
    for d in ("state", "log", "fakedev", "munge", *(f"spool-{n}" for n in NODES)):
        (root / d).mkdir()
    (root / "munge").chmod(0o755)
    for i in range(GPUS + len(MULTI_NODES)):
        (root / "fakedev" / f"gpu{i}").symlink_to("/dev/null")
    (root / "gres.conf").write_text(
        "AutoDetect=off\n"
        f"NodeName=node0 Name=gpu File={root}/fakedev/gpu[0-{GPUS - 1}]\n"
        + "".join(f"NodeName={n} Name=gpu File={root}/fakedev/gpu{GPUS + i}\n"
                  for i, n in enumerate(MULTI_NODES)))
    # Every node names its port: with several slurmd per host, slurmctld tells them apart by it.
    (root / "job_submit.lua").write_text(f"""function slurm_job_submit(job_desc, part_list, submit_uid)
  slurm.log_user("{SUBMIT_NOTICE}")
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
""")
    multi = "".join(f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
                    "CPUs=4 RealMemory=1000 Gres=gpu:1 State=UNKNOWN\n" for n in MULTI_NODES)
    slurmd_port = free_port()
    (root / "slurm.conf").write_text(f"""ClusterName=rtraintest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=20
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
KillWait=2
MinJobAge=300
InactiveLimit=0
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobSubmitPlugins=lua
GresTypes=gpu
{multi}NodeName=node0 NodeHostname=localhost NodeAddr=127.0.0.1 Port={slurmd_port} CPUs={NODE_CPUS} RealMemory=2000 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=gpu Nodes=node0 Default=YES MaxTime=INFINITE State=UP
PartitionName=multi Nodes={",".join(MULTI_NODES)} MaxTime=INFINITE State=UP
""")


def _start_munge(cluster: SlurmCluster) -> None:
    m = cluster.root / "munge"
    subprocess.run([_bin("mungekey"), "-c", "-b", "1024", "-k", str(m / "munge.key")],
                   check=True, capture_output=True)
    (m / "munge.key").chmod(0o600)
    log = open(cluster.root / "log" / "munged.out", "wb")
    cluster.procs["munged"] = subprocess.Popen(
        [_bin("munged"), "-F", f"--socket={m}/munge.socket", f"--key-file={m}/munge.key",
         f"--pid-file={m}/munged.pid", f"--seed-file={m}/munge.seed",
         f"--log-file={m}/munged.log"], stdout=log, stderr=log)
    _wait(lambda: (m / "munge.socket").exists(), cluster.procs["munged"], "munged", m / "munged.log")


def _start_slurm(cluster: SlurmCluster) -> None:
    env = cluster.env()
    logs = cluster.root / "log"
    out = open(logs / "daemons.out", "wb")
    cluster.procs["slurmctld"] = subprocess.Popen(
        [_bin("slurmctld"), "-D", "-i"], env=env, stdout=out, stderr=out)
    for node in NODES:
        cluster.procs[f"slurmd-{node}"] = subprocess.Popen(
            [_bin("slurmd"), "-D", "-N", node], env=env, stdout=out, stderr=out)

    def idle() -> bool:
        p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=env)
        states = dict(line.split() for line in p.stdout.splitlines() if line.strip())
        return p.returncode == 0 and all(states.get(n) == "idle" for n in NODES)

    _wait(idle, cluster.procs["slurmd-node0"], "slurmd", logs / "slurmd-node0.log", timeout=30)


def _wait(ready, proc: subprocess.Popen[bytes], name: str, log: Path,  # type: ignore[no-untyped-def]
          timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if ready():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-800:] if log.exists() else "(no log)"
    raise RuntimeError(f"{name} did not come up (exit {proc.poll()}); log ends: {tail}")
