"""tui.index_reader says each trouble of the run index once, and again once it is news.

Starts nothing: a real index file in a temp dir; the app's toasts are recorded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.tui.index_reader import IndexReader


def test_a_corrupt_index_is_said_once_and_again_only_after_it_was_read_fine(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text("[[runs]\nnot toml")
    said: list[tuple[str, dict[str, Any]]] = []
    marks: list[int] = []
    reader = IndexReader(RunIndex(path), lambda message, **kw: said.append((message, kw)),
                         marks.append)

    async def go() -> None:
        assert await reader.read() is None
        assert await reader.read() is None  # the next poll: nothing new to say
        assert len(said) == 1 and str(path) in said[0][0]
        assert said[0][1]["severity"] == "error" and said[0][1]["title"] == "Run index"
        path.write_text("")
        report = await reader.read()
        assert report is not None and report.records == [] and len(said) == 1
        path.write_text("[[runs]\nnot toml")
        assert await reader.read() is None
        assert len(said) == 2  # broken again after a good read: news again

    asyncio.run(go())
    assert path.read_text() == "[[runs]\nnot toml"  # never touched
    assert marks == []  # no records were skipped: the table's title is left as it was
