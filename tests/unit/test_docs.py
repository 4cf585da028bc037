"""The README is a front door to docs/: its links and the manual's hold, and CI runs its
test command.

Pure file reads, nothing started. A moved passage that leaves a link or an anchor
behind, or a README test command that `.ci/run` no longer runs, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (outside code fences)."""
    anchors: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = re.match(r"#+ (.*)", line)
        if m and not fenced:
            words = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(words.replace(" ", "-"))
    return anchors


def broken_links(page: Path) -> list[str]:
    """Relative links of `page` whose file or heading anchor does not exist."""
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
            broken.append(target)
    return broken


def test_heading_anchors_are_githubs() -> None:
    text = "# Security: what is validated, how values are quoted\n```\n# not a heading\n```\n"
    assert heading_anchors(text) == {"security-what-is-validated-how-values-are-quoted"}


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Here\n", encoding="utf-8")
    page.write_text("[ok](b.md#here) [gone](c.md) [no](b.md#there) [w](https://x.org/y)\n",
                    encoding="utf-8")
    assert broken_links(page) == ["c.md", "b.md#there"]


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    assert len(PAGES) > 5, "docs/ should hold the manual"
    broken = {p.relative_to(ROOT).as_posix(): broken_links(p) for p in PAGES}
    assert {p: b for p, b in broken.items() if b} == {}


def test_the_readme_links_every_page_of_the_manual() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES[1:]}
    assert pages - linked == set()


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("**Run the tests**", 1)[1]
    command = re.search(r"```sh\n(.*?)```", after, re.S).group(1).strip()  # type: ignore[union-attr]
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def cited_docs(text: str) -> set[str]:
    """The pages under docs/ a file cites, and any citation of the old top-level
    design file (never in the repository: its contracts are docs/design.md)."""
    cited = set(re.findall(r"docs/[\w-]+\.md", text))
    cited |= set(re.findall(r"(?<![\w/])DESIGN\.md", text))
    return cited


def test_cited_docs_finds_pages_and_the_old_design_file() -> None:
    text = "see docs/design.md and docs/gpus.md; " + "DESIGN" + ".md says"
    assert cited_docs(text) == {"docs/design.md", "docs/gpus.md", "DESIGN" + ".md"}


def test_every_page_the_code_cites_is_in_docs() -> None:
    sources = [*ROOT.glob("rtrain_tui/**/*.py"), *ROOT.glob("rtrain_tui/**/*.sh"),
               *ROOT.glob("tests/**/*.py"), ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
    cited = {(f.relative_to(ROOT).as_posix(), page) for f in sources
             for page in cited_docs(f.read_text(encoding="utf-8"))}
    assert any(page == "docs/design.md" for _, page in cited)
    assert {(f, page) for f, page in cited if not (ROOT / page).is_file()} == set()


def test_the_readme_stays_a_front_door() -> None:
    """At most 300 lines (what moves out goes to a docs/ page it links); a newcomer's two
    commands, the app on its demo host and the tests, in its first screen; every
    screenshot shown."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail to docs/"
    top = "\n".join(lines[:40])
    assert "rtrain-tui --demo" in top
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .ci/test" in top
    shots = {p.name for p in (ROOT / "screenshots").glob("*.svg")}
    assert shots and shots - set(re.findall(r"\(screenshots/([\w-]+\.svg)\)", readme)) == set()
