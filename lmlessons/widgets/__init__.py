"""Widgets and plot helpers of the lessons, one module per topic (``lmlessons.widgets.masking``,
``lmlessons.widgets.mlm``, ...). Import the submodule you need.

Importing any of them installs :class:`~lmlessons.widgets.training_view.LessonDisplay` as what
:func:`lmlessons.course.training.train` shows and :meth:`lmlessons.History.plot` draws with (the
course layer never imports the widgets)."""

from lmlessons.course.training import install_display
from lmlessons.widgets.training_view import LessonDisplay

install_display(LessonDisplay())
