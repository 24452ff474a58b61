"""Behaviour tests of what docs/teaching.md says about JupyterHub and nbgrader (its ledger section).

Each ``test_claim_teaching_*`` checks its entry of ``docs/claims.md`` against the installed
JupyterHub 6 and nbgrader 0.9 (``requirements-hub.txt``), without starting a hub. Both are
imported by the fixtures, not at collection: together they take about two seconds to import, which
every xdist worker would pay.
"""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def auth():
    """``jupyterhub.auth``, with ``SharedPasswordAuthenticator`` (from
    ``jupyterhub.authenticators.shared``) beside its own authenticators."""
    auth = pytest.importorskip("jupyterhub.auth")
    from jupyterhub.authenticators.shared import SharedPasswordAuthenticator

    return SimpleNamespace(
        DummyAuthenticator=auth.DummyAuthenticator,
        SharedPasswordAuthenticator=SharedPasswordAuthenticator,
    )


@pytest.fixture(scope="module")
def exchange():
    """``nbgrader.exchange.default``."""
    return pytest.importorskip("nbgrader.exchange.default")


def test_claim_teaching_nbgrader_default_exchange(exchange) -> None:
    assert exchange.Exchange().root == "/usr/local/share/nbgrader/exchange"


def test_claim_teaching_submissions_get_a_random_name(exchange) -> None:
    assert exchange.ExchangeSubmit().add_random_string is True


def test_claim_teaching_dummy_password_deprecated(auth) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auth.DummyAuthenticator(password="a class password")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert auth.SharedPasswordAuthenticator(user_password="a class password").user_password


@pytest.mark.parametrize("block", [False, True])
def test_claim_teaching_allow_all_skips_check_allowed(auth, block: bool) -> None:
    class Refusing(auth.SharedPasswordAuthenticator):
        """Refuses every name in check_allowed, and in check_blocked_users when ``block``."""

        def check_allowed(self, username, authentication=None):  # type: ignore[no-untyped-def]
            return False

        def check_blocked_users(self, username, authentication=None):  # type: ignore[no-untyped-def]
            return not block

    data = {"username": "root", "password": "a class password"}
    user = asyncio.run(
        Refusing(user_password="a class password", allow_all=True).get_authenticated_user(
            None, data
        )
    )
    assert (user is None) == block  # check_allowed said no; only check_blocked_users is heard
