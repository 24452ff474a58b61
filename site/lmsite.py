"""The course's Sphinx extension: lesson pages made from the stored, executed notebooks.

- The landing page gets README.md's lesson table, the one home of the lesson map.
- In a lesson, a link to README.md goes to the landing page, and a link to any other file of the
  repository goes to that file in the repository (only the lessons are part of the site).
- A notebook's saved widget state is dropped: each widget shows the text/html picture stored
  beside its live view, so a page loads no widget JavaScript.
- Each lesson page starts with "Open in Colab" and "Binder" badges for its student copy.
- The theme's search buttons lose their ``aria-label="Search"``: the button shows "Search Ctrl+K",
  and an accessible name that leaves out visible text fails WCAG 2.5.3 (axe-core's
  ``label-content-name-mismatch``); without the label the name is the visible text itself.

``site/build.py`` stages the sources and runs Sphinx; ``site/conf.py`` configures it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: The line of site/index.md that becomes README.md's lesson table.
TABLE_MARKER = "<!-- lesson table: README.md -->"
#: The heading above the lesson table in README.md (its anchor is #the-lessons).
TABLE_HEADING = "## The lessons"
#: Lesson pages are notebooks/NN_name.ipynb.
LESSON = re.compile(r"^notebooks/(\d\d_\w+)$")
#: A Markdown link or image target: ](target) or ](target "title").
LINK_TARGET = re.compile(r"\]\(([^)\s]+)")


def lesson_table(readme: str) -> str:
    """The Markdown table under README.md's "## The lessons" heading (header row included)."""
    lines = readme.splitlines()
    if TABLE_HEADING not in lines:
        raise ValueError(f"readme has no {TABLE_HEADING!r} heading")
    after = lines[lines.index(TABLE_HEADING) + 1 :]
    start = next((i for i, line in enumerate(after) if line.startswith("|")), None)
    if start is None:
        raise ValueError(f"readme has no table under {TABLE_HEADING!r}")
    table = []
    for line in after[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return "\n".join(table)


def local_targets(markdown: str) -> list[str]:
    """Relative link and image targets of ``markdown`` (no URL, no in-page anchor), in order."""
    targets = [t.split("#", 1)[0] for t in LINK_TARGET.findall(markdown)]
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def launch_urls(repository: str, branch: str, notebook: str) -> dict[str, str]:
    """Colab and Binder URLs of ``student/<notebook>`` in a GitHub ``repository``."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", repository)
    if match is None:
        raise ValueError(f"repository must be https://github.com/OWNER/NAME, got {repository!r}")
    if not notebook.endswith(".ipynb") or "/" in notebook:
        raise ValueError(f"notebook must be a file name NN_name.ipynb, got {notebook!r}")
    owner, name = match.groups()
    path = f"student/{notebook}"
    return {
        "colab": f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch}/{path}",
        "binder": f"https://mybinder.org/v2/gh/{owner}/{name}/{branch}?labpath={quote(path, '')}",
    }


def _relink(markdown: str, repository: str, branch: str) -> str:
    """README.md -> the landing page; ../other/file -> the file in the repository."""

    def target(match: re.Match[str]) -> str:
        url = match.group(1)
        path, _, anchor = url.partition("#")
        if path == "../README.md":
            url = "../index.md" + (f"#{anchor}" if anchor else "")
        elif path.startswith("../"):
            url = f"{repository}/blob/{branch}/{url[3:]}"
        return f"]({url}"

    return LINK_TARGET.sub(target, markdown)


def rewrite_lesson(source: str, repository: str, branch: str) -> str:
    """The notebook JSON ``source`` as the site reads it: links re-aimed, widget state dropped."""
    notebook = json.loads(source)
    notebook.get("metadata", {}).pop("widgets", None)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            cell["source"] = _relink(text, repository, branch)
    return json.dumps(notebook, ensure_ascii=False)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    config = app.config
    if docname == "index":
        readme = Path(config.lmlessons_readme).read_text(encoding="utf-8")
        if TABLE_MARKER not in source[0]:
            raise ValueError(f"site/index.md lacks the line {TABLE_MARKER}")
        source[0] = source[0].replace(TABLE_MARKER, lesson_table(readme))
    elif LESSON.match(docname):
        repo, branch = config.lmlessons_repository, config.lmlessons_branch
        source[0] = rewrite_lesson(source[0], repo, branch)


def _badges(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    match = LESSON.match(pagename)
    if match is None or "body" not in context:
        return
    urls = launch_urls(
        app.config.lmlessons_repository, app.config.lmlessons_branch, f"{match.group(1)}.ipynb"
    )
    colab, binder = (context["pathto"](f"_static/{n}.svg", 1) for n in ("colab", "binder"))
    context["body"] = (
        '<p class="lmlessons-launch">'
        f'<a href="{urls["colab"]}"><img src="{colab}" alt="Open in Colab"></a> '
        f'<a href="{urls["binder"]}"><img src="{binder}" alt="Launch Binder"></a>'
        "</p>\n" + context["body"]
    )


SEARCH_BUTTON = re.compile(
    r'(<button class="[^"]*search-button-field[^"]*"[^>]*?) aria-label="Search"'
)


def accessible_search_buttons(html: str) -> str:
    """``html`` with the theme's search buttons named by their visible text."""
    return SEARCH_BUTTON.sub(r"\1", html)


def _build_finished(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = accessible_search_buttons(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("lmlessons_repository", "", "env")
    app.add_config_value("lmlessons_branch", "main", "env")
    app.add_config_value("lmlessons_readme", "", "env")
    app.connect("source-read", _source_read)
    app.connect("html-page-context", _badges)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
