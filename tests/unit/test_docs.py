"""The README and docs/ stay true to the code: every setting is documented, the README stays a
front page, and every relative link (and its #anchor) lands on a file and a heading that exist,
and none is written so that Markdown shows it as text instead of a link."""

import re
from pathlib import Path

from zapomni.shared.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A relative target in parentheses that no "](" opens, such as "[a] (a note)(#b)" or
# "[a] (b.md)": Markdown shows it as text, not as a link, so LINK never sees it.
STRAY = re.compile(r"(?<!\])\((#[^()\[\]\s]*|[^()\[\]\s:]*\.md(?:#[^()\[\]\s]*)?)\)")
FENCE = ("```", "~~~")


def prose(page: Path) -> list[tuple[int, str]]:
    """The page's lines (numbered from 1) outside fenced code blocks."""
    lines, in_code = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith(FENCE):
            in_code = not in_code
        elif not in_code:
            lines.append((number, line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    ids = set()
    for _, line in prose(page):
        if re.match(r" {0,3}#{1,6} ", line):
            title = line.lstrip(" #").strip().lower()
            ids.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return ids


def test_every_setting_is_in_configuration_md():
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [f"{ENV_PREFIX}{name.upper()}" for name in Settings.__struct_fields__
               if not re.search(rf"`{ENV_PREFIX}{name.upper()}`", text)]
    assert missing == [], f"docs/configuration.md does not list {missing}"


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move detail into docs/"


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for number, line in prose(page):
            line = re.sub(r"`[^`]*`", "``", line)  # a link in inline code is text
            broken += [f"{page.name}:{number}: {target} (not a link: no \"](\" before it)"
                       for target in STRAY.findall(line)]
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # http(s), mailto
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists():
                    broken.append(f"{page.name}:{number}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{page.name}:{number}: {target} (no such heading)")
    assert broken == []
