"""Behaviour tests of what docs/teaching.md says about JupyterHub and nbgrader (its ledger section).

Each ``test_claim_teaching_*`` checks its entry of ``docs/claims.md`` against the installed
JupyterHub 6 and nbgrader 0.9 (``requirements-hub.txt``), without starting a hub.
"""

from __future__ import annotations

import asyncio
import warnings

import pytest

jupyterhub_auth = pytest.importorskip("jupyterhub.auth")
from jupyterhub.authenticators.shared import SharedPasswordAuthenticator  # noqa: E402
from nbgrader.exchange.default.exchange import Exchange  # noqa: E402
from nbgrader.exchange.default.submit import ExchangeSubmit  # noqa: E402


def test_claim_teaching_nbgrader_default_exchange() -> None:
    assert Exchange().root == "/usr/local/share/nbgrader/exchange"


def test_claim_teaching_submissions_get_a_random_name() -> None:
    assert ExchangeSubmit().add_random_string is True


def test_claim_teaching_dummy_password_deprecated() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jupyterhub_auth.DummyAuthenticator(password="a class password")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert SharedPasswordAuthenticator(user_password="a class password").user_password


class Refusing(SharedPasswordAuthenticator):
    """Refuses every name in check_allowed, or in check_blocked_users."""

    block: bool = False

    def check_allowed(self, username, authentication=None):  # type: ignore[no-untyped-def]
        return False

    def check_blocked_users(self, username, authentication=None):  # type: ignore[no-untyped-def]
        return not self.block


@pytest.mark.parametrize("block", [False, True])
def test_claim_teaching_allow_all_skips_check_allowed(block: bool) -> None:
    auth = Refusing(user_password="a class password", allow_all=True)
    auth.block = block
    data = {"username": "root", "password": "a class password"}
    user = asyncio.run(auth.get_authenticated_user(None, data))
    assert (user is None) == block  # check_allowed said no; only check_blocked_users is heard
