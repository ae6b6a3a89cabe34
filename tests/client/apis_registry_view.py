"""The API versions trio-broker advertises, read from its registry (for client tests)."""

from __future__ import annotations


def broker_ranges() -> dict[int, tuple[int, int]]:
    from trio_broker.apis.registry import API_SPECS

    return {spec.api_key: (spec.min_version, spec.max_version) for spec in API_SPECS}
