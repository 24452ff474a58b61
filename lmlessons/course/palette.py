"""The course's one palette: the colours of its pictures, a second cue for each, and text colours
that stay readable in a light and a dark theme (JupyterLab Dark, the website's dark mode).

Two rules keep every picture readable (WCAG 2.1 AA, checked on the website by axe-core and in
JupyterLab Dark by the browser test):

* text on a fixed light background gets a fixed dark ink (:data:`INK`, via :func:`on_color`), so
  the theme's near-white text colour never lands on a pastel cell;
* secondary text without a background of its own takes the theme's muted text colour
  (:data:`MUTED`), with a grey that passes AA on white where no theme defines one.

Colour is never the only carrier of meaning: each category colour has a cue of its own
(:data:`CUES`: a dashed border, bold, italics, an underline), shown in the legends too.
"""

from __future__ import annotations

# Colour-blind friendly, light enough for dark text.
COLORS: dict[str, str] = {
    "special": "#d9d9d9",  # [CLS], [SEP], [PAD]
    "mask": "#f4a582",  # replaced by [MASK]
    "random": "#92c5de",  # replaced by a random token
    "kept": "#b8e186",  # selected but kept
    "target": "#fee08b",  # a position that has a label
    "ignored": "#f0f0f0",  # label -100
    "segment_a": "#c6dbef",
    "segment_b": "#fdd0a2",
}

#: A second cue beside each colour that stands for a category.
CUES: dict[str, str] = {
    COLORS["special"]: "border-style:dashed;",
    COLORS["mask"]: "font-weight:bold;",
    COLORS["random"]: "font-style:italic;text-decoration:underline wavy;",
    COLORS["kept"]: "text-decoration:underline double;",
    COLORS["target"]: "font-weight:bold;",
    COLORS["segment_b"]: "font-style:italic;",
}

#: Text on a fixed light background: dark whatever the theme.
INK = "#1a1a1a"

#: Right and wrong as text colours: AA (4.5:1) on white and on every light box of the course.
GOOD, BAD = "#137a33", "#b8141a"

#: Secondary text: JupyterLab's, else the website theme's muted colour, else a grey with a
#: contrast of 7:1 on white.
MUTED = "color:var(--jp-content-font-color2,var(--pst-color-text-muted,#595959));"


#: The pygments style of code shown in pictures: every token colour passes AA (4.5:1) on the
#: light backgrounds of the course's boxes ("default" gives comments 4.4:1).
CODE_STYLE = "xcode"
#: The background of code shown outside a coloured box (light in every theme).
CODE_BOX = "#fcfcfc"


def ink_on(color: str) -> str:
    """The CSS of a box coloured ``color``: its background and dark ink."""
    return f"background:{color};color:{INK};"


def on_color(color: str) -> str:
    """The CSS of a token cell or legend chip of a category colour: background, ink, its cue."""
    return ink_on(color) + CUES.get(color, "")
