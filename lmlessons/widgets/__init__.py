"""Widgets and plot helpers of the lessons, one module per topic (``lmlessons.widgets.masking``,
``lmlessons.widgets.mlm``, ...). Import the submodule you need; nothing is imported here."""
