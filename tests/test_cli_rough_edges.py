"""The CLI's rough edges from the new-user trial (issue 10), each through the real CLI.

Wrong run ids, hosts that are not in the ssh config, `--demo` after the command, a
missing `--ssh-config`, the demo host's CPU default, and the help text of every option.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rtrain_tui.cli import build_parser
from rtrain_tui.core.transport.sshconfig import not_configured_message
from tests.conftest import Cli, write_config


@pytest.mark.parametrize("command", [
    ("status", "gpu", "nope"), ("stop", "gpu", "nope"), ("fetch", "gpu", "nope", "train.log"),
    ("tail", "gpu", "nope"),
])
def test_a_wrong_run_id_is_named_as_missing_on_its_host(cli: Cli, workdir: str,
                                                         command: tuple[str, ...]) -> None:
    Path(workdir).mkdir(parents=True)
    r = cli(*command, "--workdir", workdir, timeout=30)
    assert r.rc == 1 and r.out == ""
    assert r.err.startswith("rtrain-tui: no run nope on gpu (nothing at "), r.err
    assert len(r.err.splitlines()) == 1


def test_an_existing_run_still_reads_its_status_word(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "here").rc == 0
    r = cli("status", "gpu", "here", "--workdir", workdir)
    assert (r.rc, r.out) == (0, "completed\n")


def test_a_host_not_in_the_ssh_config_gets_the_closest_alias(cli: Cli) -> None:
    r = cli("status", "gpux", "r1")
    assert r.rc == 1
    assert "gpux is not in" in r.err and r.err.rstrip().endswith("did you mean gpu?"), r.err


@pytest.mark.parametrize("grace", ["nan", "inf", "-5"])
def test_a_grace_that_is_no_finite_number_is_refused_before_connecting(cli: Cli, grace: str) -> None:
    """`--grace nan` passed argparse's float() and the `< 0` check: the ladder's deadline
    (now + nan) was never reached, so a trainer that ignores SIGTERM was never killed and
    `stop` waited forever. The host `refused` is never reached: the refusal comes first
    (a negative grace, too, was said only after the host was asked about the run)."""
    r = cli("stop", "refused", "r1", "--grace", grace, timeout=30)
    assert (r.rc, r.out) == (1, "")
    assert r.err == f"rtrain-tui: --grace must be 0 or more seconds, not {grace}.\n", r.err


def test_demo_without_the_flag_says_add_demo_before_connecting(cli: Cli) -> None:
    r = cli("status", "demo", "r1")
    assert r.rc == 1 and "demo is not in" in r.err and "add --demo" in r.err, r.err


def test_the_closest_alias_message_for_each_kind_of_typo(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host h100-lab\nHost a100-rented\n")
    assert not_configured_message("h100-lba", config).endswith("did you mean h100-lab?")
    assert "did you mean demo?" in not_configured_message("demmo", config)
    assert "add --demo" in not_configured_message("demo", config)
    far = not_configured_message("zzz", config)
    assert far.startswith(f"zzz is not in {config}") and "did you mean" not in far


def test_demo_is_accepted_after_the_command(cli: Cli) -> None:
    r = cli("status", "demo", "nope", "--demo", timeout=60)
    assert r.rc == 1 and r.err.startswith("rtrain-tui: no run nope on demo"), r.err


def test_a_missing_ssh_config_file_is_an_error(cli: Cli, tmp_path: Path) -> None:
    r = cli("--ssh-config", str(tmp_path / "nope"), "runs")
    assert r.rc == 1 and r.out == ""
    assert r.err == f"rtrain-tui: --ssh-config {tmp_path / 'nope'}: no such file; give the path of an ssh config.\n"


def test_version(cli: Cli) -> None:
    r = cli("--version")
    assert r.rc == 0 and r.out.strip() == "rtrain-tui 0.1.0"


def test_the_demo_host_starts_without_gpus_and_its_hints_work_as_printed(cli: Cli, tmp_path: Path) -> None:
    """`rtrain-tui` is not on this PATH: the hints name the program as it was invoked, with
    the options that find the run again (`--demo`, the ssh config and index given)."""
    quick = tmp_path / "quick.yaml"
    quick.write_text("max_steps: 4\nstep_seconds: 0.01\nsave_steps: 2\n")
    bare = {"PATH": "/usr/bin:/bin"}
    r = cli("--demo", "start", "demo", "-c", str(quick), "--run-id", "cpu-default", timeout=120, env=bare)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    program = f"{shlex.quote(sys.executable)} -m rtrain_tui"
    program += f" --ssh-config {cli.hosts.ssh_config} --index {cli.index}"
    assert lines[:3] == ["started cpu-default on demo",
                         f"  tail: {program} tail demo cpu-default --demo",
                         f"  stop: {program} stop demo cpu-default --demo"]
    assert lines[-1] == "cpu-default on demo: completed"
    # the printed hint works as printed, pasted into a shell
    again = subprocess.run(lines[1].split(": ", 1)[1], shell=True, capture_output=True, text=True,
                           timeout=60, env={**cli.hosts.env(), **bare})
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == "cpu-default on demo: completed"
    assert "Unknown child process" not in r.err + again.stderr


def test_the_hints_say_rtrain_tui_when_it_is_on_path_else_how_this_program_was_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtrain_tui.cli.base import program

    bin_dir = Path(sys.executable).parent  # this venv: its rtrain-tui runs this interpreter
    assert (bin_dir / "rtrain-tui").is_file()
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "rtrain-tui")])
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert program() == "rtrain-tui"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program() == shlex.quote(str(bin_dir / "rtrain-tui"))  # the script's full path
    other = tmp_path / "other env"  # another installation's rtrain-tui on PATH is not this one
    other.mkdir()
    (other / "rtrain-tui").write_text("#!/opt/elsewhere/bin/python3\n")
    (other / "rtrain-tui").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", ["/src/rtrain_tui/__main__.py"])
    assert program() == f"{shlex.quote(sys.executable)} -m rtrain_tui"


def test_closing_the_demo_host_leaves_no_stray_child_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Closing as the CLI does (client, then demo host) while shells end: each shell must be
    reaped once. `proc.kill()` used to poll, reaping a shell that had just exited before
    asyncio's child watcher did, which then logged `Unknown child process pid …`."""
    from rtrain_tui.core.transport.connection import ConnectionPool
    from rtrain_tui.demo.server import start_demo_host

    async def go() -> None:
        demo = await start_demo_host(tmp_path / "home")
        pool = ConnectionPool(None)
        pool.add(demo.connection())
        await asyncio.gather(*(pool.get("demo").run("echo hi") for _ in range(4)))
        await pool.close()
        await demo.close()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        for _ in range(15):
            asyncio.run(go())
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]


def _all_actions(parser: argparse.ArgumentParser, path: str = "rtrain-tui"):  # type: ignore[no-untyped-def]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_actions(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_option_and_argument_has_help_text() -> None:
    missing = [f"{path} {action.dest}" for path, action in _all_actions(build_parser())
               if not action.help]
    assert missing == []


def test_workdir_help_names_a_recorded_run_only_where_the_command_names_a_run() -> None:
    """`preflight --help` and `start --help` said the default workdir was "the one the run
    index recorded for this run": neither names a run, so a new user was left guessing."""
    helps = {path.split()[-1]: action.help for path, action in _all_actions(build_parser())
             if action.dest == "workdir"}
    for command in ("preflight", "start"):
        assert helps[command] == "run directory parent on the host (default: ~/.praisonai-train)"
    for command in ("tail", "status", "fetch", "stop"):
        assert "recorded for this run" in (helps[command] or ""), command


def test_help_runs_for_every_command() -> None:
    for command in ("preflight", "start", "tail", "status", "fetch", "stop", "runs"):
        out = subprocess.run([sys.executable, "-m", "rtrain_tui", command, "--help"],
                             capture_output=True, text=True, check=True).stdout
        assert "--demo" in out


def test_ctrl_c_while_the_program_is_still_importing_is_one_line(tmp_path: Path) -> None:
    """On a loaded machine the imports take seconds; a Ctrl-C then printed a traceback from
    deep inside them. The signal is raised here while the CLI's modules load."""
    code = ("import importlib.abc, os, signal, sys\n"
            "class Interrupt(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'rtrain_tui.core':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "sys.argv = ['rtrain-tui', 'runs']\n"
            "import runpy\n"
            "runpy.run_module('rtrain_tui', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert (r.returncode, r.stdout) == (130, ""), r.stderr
    assert r.stderr == "rtrain-tui: interrupted (Ctrl-C) before it began: nothing was done.\n"
