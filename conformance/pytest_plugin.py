"""pytest plugin: ``pytest --rmq-target=...`` runs the rmqspec conformance suite in a user's own CI."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rmqspec")
    group.addoption("--rmq-target", action="store", default=None, help="rmqspec target, e.g. reference")
