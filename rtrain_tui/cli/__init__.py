"""The command line: `rtrain-tui preflight|start|tail|status|metrics|fetch|stop|resume|runs|costs`, or the TUI.

Thin over `rtrain_tui.core`: parse, validate, call the engine, print. Every expected
failure is one line on stderr and exit 1 (argparse's usage errors exit 2); Textual is
imported only when the TUI is asked for, so scripted calls start fast.

One module per command (or small family of commands), as pip's `commands/`:
`entry` (main: parse, dispatch, signals, the exit), `parser` (every command's options),
`registry` (command name -> its function), `base` (what several commands share: the
error line, the hints to paste, the Slurm flags), then `preflight`, `start`, `tail`,
`status`, `metrics`, `fetch`, `stop`, `resume`, `runs`, `costs`, `notify`, `watch`.
No command module imports Textual, the engine or asyncio at import time: `runs` reads the
index alone (a test pins which modules it loads).
"""

from rtrain_tui.cli.entry import leave_now, main
from rtrain_tui.cli.parser import build_parser

__all__ = ["build_parser", "leave_now", "main"]
