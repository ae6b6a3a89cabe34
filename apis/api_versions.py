"""ApiVersions (key 18): the versions this broker serves, from the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request


def _api_keys(broker: Broker) -> list[ApiVersion]:
    # The broker's own table (min.api.versions decides it), made once per broker.
    listed = getattr(broker, "_api_versions_answer", None)
    if listed is None:
        listed = broker._api_versions_answer = [
            ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(broker.api_versions_listed.items())
        ]
    return listed


async def handle(broker: Broker, request: Request) -> ApiVersionsResponse:
    if request.parsed.unsupported_version:
        # KIP-511: answered as v0 (Request.respond encodes it so), with the ranges, so the
        # client can retry with a version both sides know.
        return ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=list(_api_keys(broker))
        )
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=list(_api_keys(broker)))
