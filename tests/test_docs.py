"""The README and docs/: every quoted interval traced to the study table it comes from, every relative link
resolved (anchors included), and the pages kept within their limits.

An interval is a number followed by a bracketed pair, `+3.8 [+3.4, +4.2]` or `0.69 [−0.27, 4.29]`. Quoted in
README.md, docs/results.md or docs/where_it_pays.md, it must appear, sign for sign, in a `table.md` under a
`results/<study>/` folder that the same paragraph, list item or table row links to; '−' (U+2212) reads as '-'.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

INTERVAL_PAGES = ("README.md", "docs/results.md", "docs/where_it_pays.md")
README_MAX_LINES = 150
README_MAX_WORDS = 1500
CELL_MAX_WORDS = 60
DOCS_MAX_LINES = 3000  # docs/*.md together, docs/reference.md aside
WHERE_IT_PAYS_MAX_LINES = 200

_NUMBER = r"[+\-−]?\d+(?:\.\d+)?"
INTERVAL = re.compile(rf"(?<![\w.+\-−]){_NUMBER} \[{_NUMBER}, {_NUMBER}\]")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def _norm(text: str) -> str:
    return text.replace("−", "-")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line outside fenced code blocks; a fence line itself reads as blank."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            out.append((number, ""))
        else:
            out.append((number, "" if fenced else line))
    return out


def units(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each unit a quoted figure must carry its link in: a paragraph, a list item, a
    table row or a heading; fenced code is no unit."""
    out: list[tuple[int, list[str]]] = []
    open_unit = False
    for number, line in _prose_lines(text):
        stripped = line.strip()
        if not stripped:
            open_unit = False
        elif stripped.startswith(("|", "#")):
            out.append((number, [stripped]))
            open_unit = False
        elif ITEM.match(line) or not open_unit:
            out.append((number, [stripped]))
            open_unit = True
        else:
            out[-1][1].append(stripped)
    return [(number, " ".join(lines)) for number, lines in out]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors a page defines: its headings' (a repeated one gets -1, -2, ...) and explicit ids."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


def _targets(page: Path, text: str):
    """(raw target, resolved path or None for a URL, anchor) of each link in `text`."""
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            yield target, None, ""
            continue
        path, _, anchor = target.partition("#")
        yield target, (page.parent / path).resolve() if path else page.resolve(), anchor


def dead_links(page: Path, repo: Path = REPO) -> list[str]:
    """`page:line: target` of each relative link whose file, or whose anchor in a Markdown file, is missing."""
    dead = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        for target, path, anchor in _targets(page, line):
            if path is None:
                continue
            if not path.exists():
                dead.append(f"{page.relative_to(repo)}:{number}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                dead.append(f"{page.relative_to(repo)}:{number}: {target} (no such heading)")
    return dead


def untraced_intervals(page: Path, repo: Path = REPO) -> list[str]:
    """`page:line: interval` of each interval quoted in `page` that no table.md of a results/ study linked in
    the same unit holds."""
    results = (repo / "results").resolve()
    tables: dict[Path, str] = {}
    problems = []
    for number, text in units(page.read_text(encoding="utf-8")):
        quoted = INTERVAL.findall(text)
        if not quoted:
            continue
        studies = set()
        for _, path, _ in _targets(page, text):
            if path is not None and path.is_relative_to(results) and path != results:
                studies.add(results / path.relative_to(results).parts[0])
        texts = []
        for study in sorted(studies):
            for table in sorted(study.rglob("table.md")):
                if table not in tables:
                    tables[table] = _norm(table.read_text(encoding="utf-8"))
                texts.append(tables[table])
        for interval in quoted:
            exact = re.compile(rf"(?<![\w.+\-]){re.escape(_norm(interval))}")
            if not any(exact.search(t) for t in texts):
                where = ", ".join(s.name for s in sorted(studies)) or "no results/ study linked"
                problems.append(f"{page.relative_to(repo)}:{number}: {interval} (looked in: {where})")
    return problems


def split_cells(row: str) -> list[str]:
    """The cells of a Markdown table row; a '|' inside `code` or escaped as '\\|' does not split."""
    cells, cell, code, escaped = [], [], False, False
    for char in row.strip().strip("|"):
        if escaped:
            cell.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "`":
            code = not code
            cell.append(char)
        elif char == "|" and not code:
            cells.append("".join(cell))
            cell = []
        else:
            cell.append(char)
    cells.append("".join(cell))
    return cells


def long_cells(page: Path, repo: Path = REPO, limit: int = CELL_MAX_WORDS) -> list[str]:
    """`page:line: N words` of each table cell over `limit` words."""
    out = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        if line.lstrip().startswith("|"):
            for cell in split_cells(line):
                words = len(cell.split())
                if words > limit:
                    out.append(f"{page.relative_to(repo)}:{number}: {words} words: {cell.strip()[:60]}...")
    return out


def _pages(repo: Path = REPO) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


# ---------------------------------------------------------------- the repository's pages


def test_every_quoted_interval_is_in_a_linked_study_table():
    problems = [p for name in INTERVAL_PAGES for p in untraced_intervals(REPO / name)]
    assert not problems, "intervals not found in a table.md of a results/ study linked beside them:\n" + "\n".join(problems)


def test_every_relative_link_and_anchor_resolves():
    problems = [p for page in _pages() for p in dead_links(page)]
    assert not problems, "dead links:\n" + "\n".join(problems)


def test_the_readme_is_a_map():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md: {len(text.splitlines())} lines"
    assert len(text.split()) <= README_MAX_WORDS, f"README.md: {len(text.split())} words"
    assert re.search(r"```bash\n(?:[^`]*\n)?make test\b", text), "README.md: no `make test` line in a bash block"


def test_no_table_cell_is_over_sixty_words():
    problems = [p for page in _pages() for p in long_cells(page)]
    assert not problems, f"table cells over {CELL_MAX_WORDS} words:\n" + "\n".join(problems)


def test_docs_stay_within_their_lines():
    counts = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (REPO / "docs").glob("*.md")}
    total = sum(n for name, n in counts.items() if name != "reference.md")
    assert total <= DOCS_MAX_LINES, f"docs/*.md but reference.md: {total} lines (at most {DOCS_MAX_LINES})"
    assert counts["where_it_pays.md"] <= WHERE_IT_PAYS_MAX_LINES, f"where_it_pays.md: {counts['where_it_pays.md']} lines"


# ---------------------------------------------------------------- the checks themselves, on a made-up repository


def _repo(tmp_path: Path, page: str) -> Path:
    (tmp_path / "results" / "study" / "sub").mkdir(parents=True)
    (tmp_path / "results" / "study" / "table.md").write_text("| tango | +1.2 [+0.2, +2.2] (n=3) | -0.4 [-4.2, +3.4] |\n")
    (tmp_path / "results" / "study" / "sub" / "table.md").write_text("share 0.69 [-0.27, 4.29]\n")
    (tmp_path / "results" / "other").mkdir()
    (tmp_path / "results" / "other" / "table.md").write_text("+9.9 [+9.0, +9.9]\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page, encoding="utf-8")
    return tmp_path / "docs" / "page.md"


def test_an_interval_is_traced_sign_for_sign_within_its_own_unit(tmp_path):
    """Written as the tables write it, with '−' for '-', it is found; a sign added or dropped, a digit changed,
    a link in the next paragraph or to another study, and it is not."""
    page = _repo(tmp_path, (
        "Tango leads by +1.2 [+0.2, +2.2] and trails by −0.4 [−4.2, +3.4] ([s](../results/study/table.md)).\n"
        "The share 0.69 [−0.27, 4.29] ([s](../results/study/)).\n"
        "\n"
        "| arm | figure | study |\n|---|---|---|\n"
        "| tango | +1.2 [+0.2, +2.2] | [study](../results/study/table.md) |\n"
        "| tango | 1.2 [+0.2, +2.2] | [study](../results/study/table.md) |\n"  # sign dropped
        "| tango | +1.2 [+0.2, +2.3] | [study](../results/study/table.md) |\n"  # a digit changed
        "| tango | +1.2 [+0.2, +2.2] | [other](../results/other/table.md) |\n"  # another study's table
        "\n"
        "- an item quoting +1.2 [+0.2, +2.2] without a link\n"
        "- an item with the link: [s](../results/study/table.md)\n"
        "\n"
        "+9.9 [+9.0, +9.9] is quoted here,\n"
        "\n"
        "and the link to its study only in the next paragraph ([o](../results/other/table.md)).\n"
    ))
    problems = untraced_intervals(page, tmp_path)
    assert [p.split(": ", 1)[1].split(" (")[0] for p in problems] == [
        "1.2 [+0.2, +2.2]", "+1.2 [+0.2, +2.3]", "+1.2 [+0.2, +2.2]", "+1.2 [+0.2, +2.2]", "+9.9 [+9.0, +9.9]"]
    assert problems[0].startswith("docs/page.md:7:")


def test_a_dead_file_or_anchor_is_caught_and_code_is_not_read(tmp_path):
    page = _repo(tmp_path, (
        "# A page: its `title` (2.3)\n\n## Twice\n\n## Twice\n\n"
        "[ok](#a-page-its-title-23) [ok](#twice-1) [ok](../results/study/table.md) [url](https://x.org/y)\n"
        "[gone](missing.md) [no heading](#nowhere) [no heading there](page.md#twice-2)\n"
        "```\n[in code](nothing.md)\n```\n"
    ))
    assert [d.split(": ", 1)[1] for d in dead_links(page, tmp_path)] == [
        "missing.md (no such file)", "#nowhere (no such heading)", "page.md#twice-2 (no such heading)"]


def test_a_long_cell_is_caught_and_a_pipe_in_code_does_not_split(tmp_path):
    long = " ".join(["word"] * 61)
    page = _repo(tmp_path, f"| a | b |\n|---|---|\n| `x | y` | {' '.join(['w'] * 60)} |\n| c | {long} |\n")
    assert split_cells("| `x | y` | b \\| c |") == [" `x | y` ", " b | c "]
    found = long_cells(page, tmp_path)
    assert len(found) == 1 and found[0].startswith("docs/page.md:4: 61 words")
