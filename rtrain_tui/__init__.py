"""rtrain-tui: start, watch, fetch from and stop fine-tuning runs on SSH GPU hosts."""

from rtrain_tui.version import __version__

__all__ = ["__version__", "main"]


def main() -> int:
    """The `rtrain-tui` command.

    The CLI is imported here rather than by the entry point: on a loaded machine that
    import takes seconds, and a Ctrl-C during it is then one line, never a traceback.
    """
    import sys

    try:
        from rtrain_tui.cli import main as cli_main
    except KeyboardInterrupt:
        print("rtrain-tui: interrupted (Ctrl-C) before it began: nothing was done.",
              file=sys.stderr)
        return 130
    code = cli_main()
    from rtrain_tui.cli import leave_now

    leave_now(code)  # the command's normal end: skip the interpreter's shutdown
    return code
