"""rtrain_tui.core (and the CLI's scripted commands) never import Textual."""

import subprocess
import sys


def test_core_and_cli_import_without_textual() -> None:
    code = (
        "import sys, rtrain_tui.core, rtrain_tui.core.engine, rtrain_tui.core.transfers.transfer, "
        "rtrain_tui.core.logs.logstream, rtrain_tui.core.metrics.metrics, rtrain_tui.core.metrics.metrics_cache, "
        "rtrain_tui.core.metrics.metrics_sync, rtrain_tui.core.metrics.metrics_format, rtrain_tui.core.logs.reasons, "
        "rtrain_tui.core.logs.run_reason, rtrain_tui.core.host_view, rtrain_tui.cli\n"
        "print('textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
