"""The fault report: one line per fault case (what was injected, the result, lines lost
or duplicated, the longest wait), printed at the end of any pytest run that ran one.

A plugin (named in tests/conftest.py), not this folder's conftest: under pytest-xdist the
controller prints the summary, and it loads no conftest below tests/ (it collects
nothing); each row travels from the worker that ran its test inside the test's report.
The `fault_row` fixture that makes rows is in this folder's conftest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import pytest


@dataclass
class FaultRow:
    case: str
    injected: str
    result: str = "not run"
    lost: int | None = None
    duplicated: int | None = None
    max_wait: float | None = None  # seconds from the host answering again to output
    bound: float | None = None  # the wait the case allows


REPORT: list[FaultRow] = []
ROWS: dict[str, FaultRow] = {}
_WHERE: dict[int, tuple[str, int]] = {}  # id(row) -> its test's file and line: the order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """The row travels with its test's report: under pytest-xdist (CI) the report is
    printed by the controller, which never ran the test."""
    outcome = yield
    row = ROWS.get(item.nodeid)
    if row is not None:
        outcome.get_result().user_properties.append(("fault_row", asdict(row)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    row = ROWS.get(report.nodeid)
    if row is None:
        sent = dict(report.user_properties).get("fault_row")
        if sent is None:
            return
        row = ROWS[report.nodeid] = FaultRow(**sent)  # a worker ran it
        REPORT.append(row)
    _WHERE.setdefault(id(row), (report.location[0], report.location[1] or 0))
    if report.when == "call" or report.failed:
        row.result = "FAIL" if report.failed else ("pass" if report.passed else report.outcome)


def format_report(rows: list[FaultRow]) -> str:
    def fmt(v: object, unit: str = "") -> str:
        if v is None:
            return "-"
        return f"{v:.1f}{unit}" if isinstance(v, float) else str(v)

    table = [("case", "injected", "result", "lost", "dup", "max wait")] + [
        (r.case, r.injected, r.result, fmt(r.lost), fmt(r.duplicated),
         fmt(r.max_wait, " s") + (f" (≤ {r.bound:g} s)" if r.bound is not None and r.max_wait is not None else ""))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if REPORT:
        terminalreporter.section("fault report")
        # In the order the tests are written, however many workers ran them.
        rows = sorted(REPORT, key=lambda r: _WHERE.get(id(r), ("\uffff", 0)))
        terminalreporter.write_line(format_report(rows))
