"""Shared by the group tests that run real clients against a real broker."""

from __future__ import annotations

import pytest
from grouptest_helpers import FAST


@pytest.fixture
def broker(kafka_broker_factory):
    return kafka_broker_factory(FAST)
