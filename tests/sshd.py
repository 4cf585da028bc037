"""A real OpenSSH sshd on 127.0.0.1 for tests and benchmarks.

Two sshd processes stand for two hosts: `gpu` has the stand-in nvidia-smi on its PATH,
`cpu` has none. Both put the stand-in `praisonai_train` on PYTHONPATH (sshd_config
`SetEnv`) and give the remote side a HOME of its own, so `~` on the "host" is a temp dir.
The client side gets its own `~/.ssh/config`, key and known_hosts; nothing under the real
HOME is read or written.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REMOTE = Path(__file__).parent / "remote"
TWO_GPUS = "0, NVIDIA H200, 1024, 143771, 0\n1, NVIDIA H200, 70000, 143771, 97\n"


def find_sshd() -> str | None:
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd", "/usr/bin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SilentPort:
    """A TCP port that accepts and never speaks: an SSH host that hangs at connect."""

    port: int = 0
    _sock: socket.socket | None = None
    _conns: list[socket.socket] = field(default_factory=list)

    def start(self) -> SilentPort:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)

    def close(self) -> None:
        if self._sock:
            self._sock.close()
        for c in self._conns:
            c.close()


@dataclass
class SshHosts:
    root: Path
    ssh_config: Path
    home: Path  # the client's HOME
    remote_homes: dict[str, Path]
    gpu_file: Path
    procs: list[subprocess.Popen[bytes]]
    silent: SilentPort
    ports: dict[str, int]

    @property
    def apps_file(self) -> Path:
        """The stand-in nvidia-smi's compute processes (`GPU-fake-N, pid, used MiB` lines);
        a test that writes it removes it afterwards."""
        return self.gpu_file.with_name(self.gpu_file.name + ".apps")

    def env(self) -> dict[str, str]:
        """Environment for a CLI subprocess that sees only the test hosts."""
        env = dict(os.environ)
        env["HOME"] = str(self.home)
        env["XDG_DATA_HOME"] = str(self.root / "xdg")
        env["XDG_CACHE_HOME"] = str(self.root / "xdg-cache")  # metrics caches: never the user's
        env.pop("NO_COLOR", None)
        return env

    def extra_host(self, name: str, sftp: str = "", extra_env: dict[str, str] | None = None,
                   home: Path | None = None, gpus: Path | None = None,
                   hostname: str | None = None, bin_dir: Path | None = None) -> str:
        """Start one more sshd (no SFTP subsystem unless `sftp` names one); its ssh config.

        `extra_env` is added to the session environment (`SetEnv`), e.g. a Slurm login
        node's SLURM_CONF; values must not contain spaces or quotes. `home` is the remote
        HOME (two hosts can share one, as on NFS); `gpus` puts the stand-in nvidia-smi on
        the PATH, reading that CSV; `hostname` gives the host a name of its own (its own
        UTS namespace: needs root, as the suite does); `bin_dir` comes first on the PATH
        (stand-ins of the test's own).
        """
        sshd = find_sshd()
        assert sshd is not None
        port = free_port()
        home = home or self.root / f"remote_home_{name}"
        home.mkdir(exist_ok=True)
        path = f"{self.root / 'py_bin'}:/usr/bin:/bin"
        if bin_dir is not None:
            path = f"{bin_dir}:{path}"
        # Its key, config, pid and log files are named by port too: two tests of one worker
        # may each add a host of the same name (`rebooting`), and ssh-keygen refuses to
        # write over the first one's key.
        proc = _start_sshd(sshd, self.root, f"{name}-{port}", port,
                           f"{REMOTE / 'bin'}:{path}" if gpus else path,
                           home, gpus or self.gpu_file, sftp=sftp, extra_env=extra_env,
                           hostname=hostname)
        self.procs.append(proc)
        _wait_port(port, proc)
        return (f"Host {name}\n  HostName 127.0.0.1\n  User {getpass.getuser()}\n"
                f"  IdentityFile {self.home / '.ssh' / 'id_test'}\n"
                f"  UserKnownHostsFile {self.home / '.ssh' / 'known_hosts'}\n  Port {port}\n")

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        self.silent.close()


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _start_sshd(sshd: str, root: Path, name: str, port: int, path_env: str,
                remote_home: Path, gpu_file: Path,
                sftp: str = "Subsystem sftp internal-sftp\n",
                extra_env: dict[str, str] | None = None,
                hostname: str | None = None) -> subprocess.Popen[bytes]:
    host_key = root / f"host_key_{name}"
    _keygen(host_key)
    config = root / f"sshd_{name}.conf"
    pythonpath = REMOTE / "py"
    extra = "".join(f" {k}={v}" for k, v in (extra_env or {}).items())
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"PidFile {root / f'sshd_{name}.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        "StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n"
        f"MaxSessions 10\n{sftp}LogLevel ERROR\n"
        f"SetEnv PATH={path_env} PYTHONPATH={pythonpath} HOME={remote_home} "
        f"RTRAIN_FAKE_GPUS={gpu_file}{extra}\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True, mode=0o755)
    log = open(root / f"sshd_{name}.log", "wb")
    argv = [sshd, "-D", "-e", "-f", str(config)]
    if hostname is not None:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv]
    return subprocess.Popen(argv, stdout=log, stderr=log)


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}; see its log")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on port {port} did not answer")


def start_hosts(root: Path) -> SshHosts:
    sshd = find_sshd()
    if sshd is None:
        raise RuntimeError("sshd not found: install openssh-server (the tests need a real sshd)")
    root.mkdir(parents=True, exist_ok=True)
    home = root / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    client_key = home / ".ssh" / "id_test"
    _keygen(client_key)
    shutil.copy(f"{client_key}.pub", root / "authorized_keys")
    gpu_file = root / "gpus.csv"
    gpu_file.write_text(TWO_GPUS)
    # The "host" runs python3 = the interpreter running the tests, so the stand-ins work
    # on any machine that can run the tests, whatever python the system has.
    py_bin = root / "py_bin"
    py_bin.mkdir()
    (py_bin / "python3").symlink_to(sys.executable)
    base_path = f"{py_bin}:/usr/local/bin:/usr/bin:/bin"
    procs, ports, remote_homes = [], {}, {}
    for name, path_env in (("gpu", f"{REMOTE / 'bin'}:{base_path}"), ("cpu", base_path)):
        ports[name] = free_port()
        remote_homes[name] = root / f"remote_home_{name}"
        remote_homes[name].mkdir()
        procs.append(_start_sshd(sshd, root, name, ports[name], path_env, remote_homes[name], gpu_file))
    for name, proc in zip(ports, procs):
        _wait_port(ports[name], proc)
    silent = SilentPort().start()
    closed = free_port()
    user = getpass.getuser()
    common = (
        f"  HostName 127.0.0.1\n  User {user}\n  IdentityFile {client_key}\n"
        f"  UserKnownHostsFile {home / '.ssh' / 'known_hosts'}\n"
    )
    config = home / ".ssh" / "config"
    (home / ".ssh" / "extra.conf").write_text(f"Host included\n{common}  Port {ports['cpu']}\n")
    config.write_text(
        "Include extra.conf\n"
        f"Host gpu\n{common}  Port {ports['gpu']}\n"
        f"Host cpu\n{common}  Port {ports['cpu']}\n"
        f"Host refused\n{common}  Port {closed}\n"
        f"Host silent\n{common}  Port {silent.port}\n  ConnectTimeout 2\n"
        "Host *.internal !bastion\n  User nobody\n"
    )
    return SshHosts(root, config, home, remote_homes, gpu_file, procs, silent, ports)


def gpu_state(home: Path) -> Path:
    """The host's GPU state for its user (lock, records, queue: backends/direct/gpu_box.sh)
    under the remote HOME `home`: one per box, named by the box's host name."""
    return home / ".local" / "state" / "rtrain-tui" / f"gpus-{socket.gethostname()}"
