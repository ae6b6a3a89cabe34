"""The registry of implemented APIs: which versions the broker serves, and who handles them.

ApiVersions answers from this table, so a client is never offered a version without a
handler. Handler modules are imported on first use: start-up needs only the table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

__all__ = ["API_SPECS", "ApiSpec", "dispatch", "supported_versions"]


@attrs.frozen
class ApiSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    module: str  # under trio_broker.apis; provides `async def handle(broker, request)`


API_SPECS: tuple[ApiSpec, ...] = (
    ApiSpec(18, "ApiVersions", 0, 4, "api_versions"),
    ApiSpec(3, "Metadata", 0, 12, "metadata"),
    ApiSpec(0, "Produce", 3, 11, "produce"),
    ApiSpec(1, "Fetch", 4, 17, "fetch"),
)

_BY_KEY = {spec.api_key: spec for spec in API_SPECS}
_handlers: dict[int, Any] = {}


def supported_versions() -> dict[int, tuple[int, int]]:
    return {spec.api_key: (spec.min_version, spec.max_version) for spec in API_SPECS}


async def dispatch(broker: Broker, request: Request) -> Any:
    handle = _handlers.get(request.api_key)
    if handle is None:
        module = importlib.import_module(f"trio_broker.apis.{_BY_KEY[request.api_key].module}")
        handle = _handlers[request.api_key] = module.handle
    return await handle(broker, request)
