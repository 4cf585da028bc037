"""`python -m tests.faults [pytest args]`: run the fault suite and print its report.

The report (case, what was injected, result, lines lost/duplicated, the longest wait
from the host answering again to output) is printed by this folder's conftest at the
end of any pytest run that includes it; this entry point just runs the folder alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", str(here.parents[1]),
                            str(here), *argv]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
