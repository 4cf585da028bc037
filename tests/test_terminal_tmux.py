"""In a real terminal (tmux), a hostile trainer's output changes neither the terminal's
title nor its clipboard: not through `tail`, not through the TUI's log pane.

tmux acts on OSC 0/2 (the pane title) and, with `set-clipboard on`, on OSC 52 (a paste
buffer), so both can be read back. Each test first proves that the same terminal does
change when the escapes reach it raw (`tail --raw`), so a pass means something.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Cli, write_config

TITLE = "rt-clean-title"


@pytest.fixture
def tmux(tmp_path: Path):  # type: ignore[no-untyped-def]
    if shutil.which("tmux") is None:
        pytest.fail("tmux not found: install tmux (apt-get install tmux); the terminal-safety "
                    "tests read a real terminal's title and clipboard", pytrace=False)
    socket = f"rt-test-{os.getpid()}-{time.monotonic_ns()}"

    def run(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *args], check=True,
                              capture_output=True, text=True, timeout=20).stdout

    run("new-session", "-d", "-x", "140", "-y", "40", "-s", "t", "sh")
    run("set-option", "-g", "set-clipboard", "on")
    yield run
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=20)


def _fresh_pane(tmux, name: str, script: Path) -> str:  # type: ignore[no-untyped-def]
    """A new window running `script`, its title set to TITLE first; returns its target."""
    tmux("new-window", "-d", "-n", name, f"sh {shlex.quote(str(script))}; sleep 600")
    target = f"t:{name}"
    tmux("select-pane", "-t", target, "-T", TITLE)
    return target


def _wait_for(tmux, target: str, text: str, timeout: float = 60) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        screen = tmux("capture-pane", "-p", "-t", target)
        if text in screen:
            return screen
        assert time.monotonic() < deadline, f"{text!r} never appeared; the pane shows:\n{screen}"
        time.sleep(0.2)


def _title(tmux, target: str) -> str:  # type: ignore[no-untyped-def]
    return tmux("display-message", "-p", "-t", target, "#{pane_title}").strip()


def _buffers(tmux) -> str:  # type: ignore[no-untyped-def]
    return tmux("list-buffers", "-F", "#{buffer_sample}")


def _script(cli: Cli, tmp_path: Path, name: str, *args: str) -> Path:
    """A shell script that runs rtrain-tui with the test hosts' environment."""
    env = cli.hosts.env()
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()
                      if k.isidentifier() and k in {"HOME", "XDG_DATA_HOME", "PATH", "TERM", "LANG"})
    cmd = shlex.join([sys.executable, "-m", "rtrain_tui", "--ssh-config", str(cli.hosts.ssh_config),
                      "--index", str(cli.index), *args])
    script = tmp_path / f"{name}.sh"
    script.write_text(f"{exports}cd {shlex.quote(os.getcwd())}\n{cmd}\necho RT-DONE-$?\n")
    return script


def _hostile_run(cli: Cli, tmp_path: Path, workdir: str, run_id: str) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", steps=2, hostile_escapes=True)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id, "--follow")
    assert r.rc == 0, r.err


def test_tail_leaves_the_title_and_clipboard_alone_and_raw_would_not(
        cli: Cli, tmp_path: Path, workdir: str, tmux) -> None:  # type: ignore[no-untyped-def]
    _hostile_run(cli, tmp_path, workdir, "hostile-tmux")

    # The control: the raw bytes do retitle this terminal and write its clipboard.
    raw = _fresh_pane(tmux, "raw", _script(cli, tmp_path, "raw", "tail", "gpu", "hostile-tmux",
                                           "--workdir", workdir, "--raw"))
    _wait_for(tmux, raw, "RT-DONE-0")
    assert _title(tmux, raw).startswith("PWNED-TITLE"), _title(tmux, raw)
    assert "PWNED-CLIP" in _buffers(tmux)
    tmux("delete-buffer")

    safe = _fresh_pane(tmux, "safe", _script(cli, tmp_path, "safe", "tail", "gpu", "hostile-tmux",
                                             "--workdir", workdir))
    screen = _wait_for(tmux, safe, "RT-DONE-0")
    assert "hostile: clipboard  osc52" in screen  # the line itself is shown, inert
    assert _title(tmux, safe) == TITLE
    assert _buffers(tmux) == ""


def test_the_tui_log_pane_leaves_the_title_and_clipboard_alone(
        cli: Cli, tmp_path: Path, workdir: str, tmux) -> None:  # type: ignore[no-untyped-def]
    _hostile_run(cli, tmp_path, workdir, "hostile-tui-tmux")
    app = _fresh_pane(tmux, "app", _script(cli, tmp_path, "app"))
    _wait_for(tmux, app, "hostile-tui-tmux")  # the runs table lists the run (and has focus)
    time.sleep(0.5)
    tmux("send-keys", "-t", app, "Enter")  # open the run's log
    _wait_for(tmux, app, "training done")  # the whole log drawn, every hostile line in it
    time.sleep(0.5)
    title, buffers = _title(tmux, app), _buffers(tmux)
    tmux("send-keys", "-t", app, "q")
    _wait_for(tmux, app, "RT-DONE-0")
    # Textual itself may set a title of its own; the trainer's never shows.
    assert "PWNED" not in title, title
    assert buffers == ""


def test_tail_on_a_terminal_folds_bar_redraws_and_piped_tail_keeps_them(
        cli: Cli, tmp_path: Path, workdir: str, tmux) -> None:  # type: ignore[no-untyped-def]
    config = write_config(tmp_path / "hf.yaml", hf_style=True, steps=80, step_seconds=0.25,
                          eval_steps=20)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "bars",
            "--no-follow")
    assert r.rc == 0, r.err
    pane = _fresh_pane(tmux, "tail", _script(cli, tmp_path, "tail", "tail", "gpu", "bars",
                                             "--workdir", workdir))
    # While it runs: the printed lines, and under them one bar that is redrawn in place.
    live = _wait_for(tmux, pane, "'loss': 1.5000")  # step 60 of 80, at ~15 s
    assert "Writing model shards" not in live  # still running: this is the live view
    rows = [row for row in live.splitlines() if row.strip()]
    assert sum("%|" in row for row in rows) == 1, live
    assert "%|" in rows[-1], live  # the bar is the last line, as tqdm draws it
    _wait_for(tmux, pane, "RT-DONE-0")
    screen = tmux("capture-pane", "-p", "-S", "-500", "-t", pane)  # with the scrollback
    rows = screen.splitlines()
    assert [row for row in rows if "%|" in row] == [
        "100%|██████████| 80/80 [00:80<00:00,  4.00it/s]",
        "Writing model shards: 100%|██████████| 1/1 [00:00<00:00,  9.80it/s]"], screen
    assert sum("'loss'" in row for row in rows) == 40  # every loss line, each once
    # Piped, every redraw is a line of its own: scripts grep them.
    piped = cli("tail", "gpu", "bars", "--workdir", workdir)
    assert piped.rc == 0, piped.err
    assert sum("%|" in line for line in piped.out.splitlines()) >= 81


def test_tail_on_a_terminal_shows_no_blank_line_beside_tqdm_write_dicts(
        cli: Cli, tmp_path: Path, workdir: str, tmux) -> None:  # type: ignore[no-untyped-def]
    """Issue 15 item 36: tqdm's erase of its bar before each dict showed as an empty line."""
    config = write_config(tmp_path / "tw.yaml", hf_style=True, tqdm_write=True, steps=20,
                          step_seconds=0.01, eval_steps=100)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "tw").rc == 0
    pane = _fresh_pane(tmux, "tw", _script(cli, tmp_path, "tw", "tail", "gpu", "tw", "--workdir", workdir))
    _wait_for(tmux, pane, "RT-DONE-0")
    rows = tmux("capture-pane", "-p", "-S", "-500", "-t", pane).splitlines()
    dicts = [i for i, row in enumerate(rows) if row.startswith("{'loss'")]
    assert len(dicts) == 10, rows
    assert "" not in rows[dicts[0]:dicts[-1]], "\n".join(rows)  # no blank between them


def test_ctrl_c_in_a_terminal_during_a_demo_upload_is_one_line_and_leaves_nothing(
        tmux, cli: Cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real Ctrl-C reaches the terminal's whole process group, where the demo host's
    shells lived too: the one receiving the upload died mid-write, and the start ended in
    a broken pipe and "Exception ignored … Event loop is closed" instead of a clean cancel."""
    quick = tmp_path / "quick.yaml"
    quick.write_text("max_steps: 4\nstep_seconds: 0.01\n")
    data = tmp_path / "big.jsonl"
    with data.open("wb") as f:
        f.write(os.urandom(160 << 20))
    script = _script(cli, tmp_path, "cancel", "--demo", "start", "demo", "-c", str(quick),
                     "-d", str(data), "--run-id", "cut", "--no-follow")
    # The Ctrl-C reaches the script's shell too: it waits for rtrain-tui, then goes on.
    script.write_text("trap 'true' INT\n" + script.read_text())
    target = _fresh_pane(tmux, "cancel", script)
    _wait_for(tmux, target, "big.jsonl", timeout=120)  # its progress bar: the upload is on
    tmux("send-keys", "-t", target, "C-c")
    screen = _wait_for(tmux, target, "RT-DONE-", timeout=60)
    lines = [line for line in screen.splitlines() if line.strip()]
    # The dataset goes while the preflight and the run dir are made, so a Ctrl-C during
    # its upload may come before the run dir exists: either true line, one of them.
    assert lines[-1] == "RT-DONE-130", screen
    assert lines[-2] in ("rtrain-tui: interrupted (Ctrl-C): start cancelled; run cut was removed "
                         "from demo, nothing is left of it.",
                         "rtrain-tui: interrupted (Ctrl-C): start cancelled; no run was created "
                         "on demo."), screen
    assert "Traceback" not in screen and "Exception" not in screen and "Broken" not in screen
    demo_runs = Path(cli.hosts.env()["XDG_DATA_HOME"]) / "rtrain-tui" / "demo-host" / ".praisonai-train"
    assert not (demo_runs / "cut").exists()
