"""Sphinx configuration of the course website (``make site``; sources staged by site/build.py).

The pages are the lessons as they are stored in notebooks/: nothing is executed. Everything a page
loads is served by the site itself (theme, fonts, icons, MathJax, search), so it works offline.
"""

from __future__ import annotations

import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
sys.path.insert(0, str(SITE))  # lmsite, the course's extension, lives beside this file

# The repository the launch badges open. A placeholder: whoever hosts the course changes it
# here and in README.md (the line under "The lessons" says where).
lmlessons_repository = "https://github.com/lmlessons/lmlessons"
lmlessons_branch = "main"
lmlessons_readme = str(SITE.parent / "README.md")

project = "lmlessons"
html_title = "lmlessons: the training losses of language models"
author = "The lmlessons authors"
copyright = "the lmlessons authors: code MIT, lessons and figures CC BY 4.0"

extensions = [
    "myst_nb",
    "sphinx_copybutton",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax; no CDN
    "lmsite",
]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# MyST: $...$ and $$...$$ math as in Jupyter, anchors for headings (../index.md#the-lessons).
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# MyST-NB: read the stored outputs, never execute. A widget output shows the text/html picture
# stored beside its view (the view and JavaScript outputs are never chosen), and no widget
# JavaScript is loaded from a CDN.
nb_execution_mode = "off"
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/javascript", None),
]
nb_ipywidgets_js: dict[str, dict[str, str]] = {}
nb_merge_streams = True

# A copy button on code, not on outputs.
copybutton_selector = "div:not(.output) > div.highlight pre"
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

html_theme = "sphinx_book_theme"
html_theme_options = {
    "repository_url": lmlessons_repository,
    "repository_branch": lmlessons_branch,
    "use_repository_button": True,
    "use_download_button": False,
    "show_toc_level": 2,
}
# A first visit has no stored light/dark mode; without a default the theme logs a console error.
html_context = {"default_mode": "auto"}
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # without one, a browser asks for /favicon.ico and logs a 404
html_css_files = ["lmsite.css"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
