"""What ``check``, ``hint`` and ``solution`` return: small objects that print as plain text and
render as HTML in Jupyter.

Both renderings are deterministic (no timings, no ids, no addresses, no random text), so a
notebook that shows a check result passes strict nbval.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from lmlessons.course.palette import CODE_STYLE, INK

_STATUS_STYLE = {
    # status: (symbol, border colour, background)
    "passed": ("✓", "#1a9641", "#eef8ee"),
    "failed": ("✗", "#d7191c", "#fdf0f0"),
    "not_attempted": ("○", "#888888", "#f6f6f6"),
}


_EMPHASIS = re.compile(r"\*([^*\s](?:[^*]*[^*\s])?)\*")


def inline(text: str) -> str:
    """Escape ``text`` for HTML; `backticked` spans become <code>, *starred* ones <em>."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        part = html.escape(part)
        if i % 2 == 1 and i < len(parts) - 1:
            out.append(f"<code>{part}</code>")
        else:
            out.append(_EMPHASIS.sub(r"<em>\1</em>", part))
    if len(parts) % 2 == 0:  # an unmatched backtick: show it as typed
        out[-1] = "`" + out[-1]
    return "".join(out)


def _paragraphs_html(text: str) -> str:
    """Paragraphs separated by blank lines (line breaks inside one are soft); '- ' starts a list
    item; a paragraph indented by 4 spaces is code."""
    blocks = []
    for para in re.split(r"\n\s*\n", text.strip("\n").rstrip()):
        lines = para.split("\n")
        if all(line.startswith("    ") for line in lines):  # an indented code block
            code = html.escape("\n".join(line[4:] for line in lines))
            blocks.append(
                f'<pre style="margin:4px 0;font-size:12px;background:transparent">{code}</pre>'
            )
        elif lines[0].startswith("- "):  # a list; lines not starting with "- " continue an item
            entries: list[str] = []
            for line in lines:
                if line.startswith("- ") or not entries:
                    entries.append(line[2:] if line.startswith("- ") else line)
                else:
                    entries[-1] += " " + line.strip()
            items = "".join(f"<li>{inline(e)}</li>" for e in entries)
            blocks.append(f'<ul style="margin:4px 0 4px 18px;padding:0">{items}</ul>')
        else:
            blocks.append(
                '<p style="margin:4px 0">'
                + inline(" ".join(line.strip() for line in lines))
                + "</p>"
            )
    return "".join(blocks)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of ``check(name, fn)``.

    Attributes:
        exercise: the exercise name, e.g. ``"mask_tokens"``.
        status: ``"passed"``, ``"failed"`` or ``"not_attempted"``.
        title: one line: what is wrong (or that all is well).
        message: the explanation, plain text (paragraphs separated by blank lines).
        mistake: a stable code naming the diagnosed mistake (``None`` when passed), e.g.
            ``"masks_special_tokens"``; tests and teachers can rely on it.
        passed_checks: what was verified before the verdict (all of it when passed).
    """

    exercise: str
    status: str
    title: str
    message: str = ""
    mistake: str | None = None
    passed_checks: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def attempted(self) -> bool:
        return self.status != "not_attempted"

    def _footer(self) -> str:
        if self.status == "failed":
            return f'Stuck? `hint("{self.exercise}", 1)` gives a nudge (levels 1 to 3).'
        return ""

    def __str__(self) -> str:
        symbol = _STATUS_STYLE[self.status][0]
        lines = [f"{symbol} {self.exercise}: {self.title}"]
        if self.message:
            lines += ["", self.message.strip()]
        if self.passed and self.passed_checks:
            lines += [""] + [f"- {c}" for c in self.passed_checks]
        footer = self._footer()
        if footer:
            lines += ["", footer]
        return "\n".join(lines)

    def __repr__(self) -> str:  # what a notebook shows as text/plain
        return str(self)

    def _repr_html_(self) -> str:
        symbol, border, background = _STATUS_STYLE[self.status]
        body = _paragraphs_html(self.message) if self.message else ""
        if self.passed and self.passed_checks:
            items = "".join(f"<li>{inline(c)}</li>" for c in self.passed_checks)
            body += (
                '<details style="margin-top:4px"><summary>What was checked</summary>'
                f'<ul style="margin:4px 0 4px 18px;padding:0">{items}</ul></details>'
            )
        footer = self._footer()
        if footer:
            body += f'<p style="margin:6px 0 0 0;color:#555">{inline(footer)}</p>'
        return (
            f'<div style="border-left:4px solid {border};background:{background};color:{INK};'
            'padding:6px 10px;margin:4px 0;font-family:sans-serif;font-size:13px;line-height:1.4">'
            f'<div style="font-weight:bold;margin-bottom:2px">{symbol} '
            f"<code>{html.escape(self.exercise)}</code>: {inline(self.title)}</div>{body}</div>"
        )


@dataclass(frozen=True)
class Hint:
    """A graded hint (level 1 nudges, level 3 is nearly the solution)."""

    exercise: str
    level: int
    levels: int
    text: str

    def __str__(self) -> str:
        more = (
            f'\n\nMore: `hint("{self.exercise}", {self.level + 1})`'
            if self.level < self.levels
            else ""
        )
        text = self.text.strip("\n").rstrip()  # keep the indent of a first line of code
        return f"Hint {self.level}/{self.levels} for {self.exercise}:\n\n{text}{more}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        more = (
            '<p style="margin:6px 0 0 0;color:#555">More: '
            f'<code>hint("{html.escape(self.exercise)}", {self.level + 1})</code></p>'
            if self.level < self.levels
            else ""
        )
        return (
            f'<div style="border-left:4px solid #2c7bb6;background:#eef4fa;color:{INK};'
            "padding:6px 10px;"
            'margin:4px 0;font-family:sans-serif;font-size:13px;line-height:1.4">'
            f'<div style="font-weight:bold">Hint {self.level}/{self.levels} for '
            f"<code>{html.escape(self.exercise)}</code></div>"
            f"{_paragraphs_html(self.text)}{more}</div>"
        )


@dataclass(frozen=True)
class Solution:
    """A reference solution: its source code, shown highlighted in Jupyter."""

    exercise: str
    source: str

    def __str__(self) -> str:
        return f"Reference solution for {self.exercise}:\n\n{self.source.rstrip()}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        formatter = HtmlFormatter(noclasses=True, nowrap=True, style=CODE_STYLE)
        code = highlight(self.source, PythonLexer(), formatter)
        return (
            f'<div style="border-left:4px solid #7b3294;background:#f7f2fa;color:{INK};'
            "padding:6px 10px;"
            'margin:4px 0;font-family:sans-serif;font-size:13px">'
            '<div style="font-weight:bold">Reference solution for '
            f"<code>{html.escape(self.exercise)}</code></div>"
            '<pre style="margin:4px 0;font-size:12px;line-height:1.35;background:transparent">'
            f"{code}</pre></div>"
        )
