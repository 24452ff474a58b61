"""Maintainer commands (not installed with the package): ``python -m tools.NAME``."""
