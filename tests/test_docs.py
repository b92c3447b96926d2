"""The README is the front door (two commands, install, a tour, links); the reference lives in docs/."""

from __future__ import annotations

import re

from tests.assets.paths import REPO

README = (REPO / "README.md").read_text()


def test_readme_opens_with_the_two_commands_and_stays_short():
    lines = README.splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; it is a front door: move reference material to docs/"
    first_block = README[: README.index("## ")]
    assert "make demo" in first_block and "make test" in first_block


def test_every_local_link_in_the_readme_and_the_docs_resolves():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} → {target}")
    assert not broken, broken


def test_every_docs_page_is_in_the_site_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    missing = sorted(p for p in pages if p not in nav)
    assert not missing, f"docs pages not in mkdocs.yml's nav: {missing}"
