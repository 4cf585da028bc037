"""`rtrain-tui fetch`: files and directories, verified, and confined to the run dir."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from pathlib import Path

import pytest

from tests.checkpoint_files import save_order, write_checkpoint
from tests.conftest import Cli, write_config
from tests.unit.test_validate import BAD_FETCH_PATHS


@pytest.fixture
def done_run(cli: Cli, tmp_path: Path, workdir: str) -> Path:
    config = write_config(tmp_path / "c.yaml", steps=2)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "done").rc == 0
    return Path(workdir) / "done"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_fetch_a_directory_lands_verified(cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli("fetch", "gpu", "done", "lora_model", "--out", str(out), "--workdir", workdir)
    assert r.rc == 0, r.err
    assert r.out == f"fetched to {out / 'lora_model'}\n"
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert _sha(out / "lora_model" / name) == _sha(done_run / "lora_model" / name)
    assert not list(out.rglob("*.part"))


def test_fetch_a_file_into_the_current_directory_by_default(cli: Cli, done_run: Path, workdir: str,
                                                           tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    r = cli("fetch", "gpu", "done", "train.log", "--workdir", workdir, cwd=here)
    assert r.out == "fetched to train.log\n"
    assert (here / "train.log").read_text() == (done_run / "train.log").read_text()


@pytest.mark.parametrize("path", BAD_FETCH_PATHS)
def test_paths_outside_are_refused_before_connecting(cli: Cli, path: str) -> None:
    r = cli("fetch", "refused", "r1", path)
    assert r.rc == 1
    assert r.err.strip() == (f"rtrain-tui: {path!r} points outside the run directory. Fetch paths "
                             "are relative to it, e.g. 'lora_model' or 'train.log'.")


def test_symlink_out_of_the_run_dir_is_refused(cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    os.symlink("/etc", done_run / "sneaky")
    os.symlink("/etc/hostname", done_run / "lora_model" / "inner")
    out = tmp_path / "out"
    r = cli("fetch", "gpu", "done", "sneaky", "--out", str(out), "--workdir", workdir)
    assert r.rc == 1 and "'sneaky' points outside the run directory" in r.err
    r = cli("fetch", "gpu", "done", "lora_model", "--out", str(out), "--workdir", workdir)
    assert r.rc == 1 and "'lora_model/inner' points outside the run directory" in r.err
    assert not (out / "sneaky").exists() and not (out / "lora_model" / "inner").exists()


def test_fetch_python_runs_the_transfer_on_the_host(cli: Cli, done_run: Path, workdir: str,
                                                    tmp_path: Path) -> None:
    """`--python` names the host's interpreter for the transfer program, over the one
    the run index recorded (it was accepted, and ignored). The test host is this machine:
    a wrapper there records that it ran, then runs the host's python3."""
    ran = tmp_path / "ran"
    wrapper = tmp_path / "my-python"
    wrapper.write_text(f"#!/bin/sh\necho \"$1\" >> '{ran}'\nexec python3 \"$@\"\n")
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    r = cli("fetch", "gpu", "done", "train.log", "--out", str(out), "--workdir", workdir,
            "--python", str(wrapper))
    assert r.rc == 0, r.err
    assert (out / "train.log").read_bytes() == (done_run / "train.log").read_bytes()
    assert ran.read_text() == "-c\n"  # the transfer program, once
    r = cli("fetch", "gpu", "done", "train.log", "--out", str(out), "--workdir", workdir,
            "--python=-c")  # validated before the host is asked, as every command's
    assert r.rc == 1 and "python '-c' is not usable" in r.err


@pytest.mark.parametrize("path", ["train.log", "checkpoint-500"])
@pytest.mark.parametrize("python", ["-c", "python3; touch /tmp/x", "$(id)", "py\nthon", ""])
def test_a_bad_fetch_python_is_refused_before_connecting(cli: Cli, path: str, python: str) -> None:
    """Whatever the path (a checkpoint's is checked for completeness on the host first),
    the interpreter is refused before any host is asked: `refused` accepts no connection."""
    r = cli("fetch", "refused", "r1", path, f"--python={python}")
    assert r.rc == 1
    assert r.err.strip() == (f"rtrain-tui: python {python!r} is not usable: give a program "
                             "name or path such as 'python3' or '/opt/conda/bin/python'.")


def test_missing_path_is_named(cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    r = cli("fetch", "gpu", "done", "checkpoint-500", "--out", str(tmp_path), "--workdir", workdir)
    assert r.rc == 1
    assert r.err.strip() == f"rtrain-tui: 'checkpoint-500' does not exist in the run directory {done_run}."


def test_a_fetch_runs_no_script_in_the_hosts_shell_before_its_bytes(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its transfer program alone: whether the run exists is asked only when the fetch
    fails (the missing-run message is test_a_wrong_run_id_is_named_as_missing_on_its_host's),
    and a `~` workdir is expanded by the program, not resolved by a script first: each
    was a round trip before the first byte on a distant host."""
    from rtrain_tui import cli as cli_module
    from rtrain_tui.core.transport.connection import HostConnection

    word = f"~/fetch-{tmp_path.name}"  # under the test host's HOME, as the default is
    workdir = cli.hosts.remote_homes["gpu"] / word[2:]
    config = write_config(tmp_path / "c.yaml", steps=2)
    try:
        assert cli("start", "gpu", "-c", str(config), "--workdir", word, "--run-id", "home",
                   "--gpus", "0").rc == 0
        sent: list[str] = []
        real_run = HostConnection.run

        async def recording(self: HostConnection, script: str, timeout: float = 30.0) -> str:
            sent.append(script)
            return await real_run(self, script, timeout)

        for key, value in cli.hosts.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(HostConnection, "run", recording)
        out = tmp_path / "out"
        assert cli_module.main(["--ssh-config", str(cli.hosts.ssh_config), "--index", str(cli.index),
                                "fetch", "gpu", "home", "lora_model", "--out", str(out),
                                "--workdir", word]) == 0
        assert _sha(out / "lora_model" / "adapter_model.safetensors") == _sha(
            workdir / "home" / "lora_model" / "adapter_model.safetensors")
        assert sent == []
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_missing_adapter_names_the_newest_complete_checkpoint_and_its_fetch(
        cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    """A run stopped before its end has no lora_model: the error said only that, leaving a
    new user to guess what to fetch instead. It names the newest complete checkpoint (not
    a newer one cut off mid-save) and the fetch to paste."""
    shutil.rmtree(done_run / "lora_model")
    write_checkpoint(done_run, "checkpoint-10", 10, save_order())
    write_checkpoint(done_run, "checkpoint-20", 20, save_order()[:-1])  # cut off mid-save
    out = tmp_path / "my out"
    r = cli("fetch", "gpu", "done", "lora_model", "--out", str(out), "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err.startswith(f"rtrain-tui: 'lora_model' does not exist in the run directory {done_run}. "
                            "The run's newest complete checkpoint is checkpoint-10: `"), r.err
    hint = r.err.split("`")[1]
    assert hint.endswith(f"fetch gpu done checkpoint-10 --out '{out}' --workdir {workdir}"), hint
    assert r.err.endswith("` fetches it.\n")
    words = shlex.split(hint)
    pasted = cli(*words[words.index("fetch"):])
    assert pasted.out == f"fetched to {out / 'checkpoint-10'}\n", pasted.err
    # the other paths a run lacks are said as before: a checkpoint is no stand-in for them
    other = cli("fetch", "gpu", "done", "eval.json", "--workdir", workdir)
    assert other.err == f"rtrain-tui: 'eval.json' does not exist in the run directory {done_run}.\n"
