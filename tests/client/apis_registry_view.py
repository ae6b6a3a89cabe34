"""The API versions trio-broker advertises, read from its registry (for client tests)."""

from __future__ import annotations


def broker_ranges() -> dict[int, tuple[int, int]]:
    from trio_broker.apis.registry import advertised_versions

    return advertised_versions()
