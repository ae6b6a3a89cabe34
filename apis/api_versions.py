"""ApiVersions (key 18): the versions this broker serves, from the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trio_broker.apis.registry import API_SPECS
from trio_broker.errors import ErrorCode
from trio_broker.protocol._generated.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
)

if TYPE_CHECKING:
    from trio_broker.broker import Broker
    from trio_broker.server.requests import Request

_API_KEYS = [
    ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
    for s in sorted(API_SPECS, key=lambda s: s.api_key)
]


async def handle(broker: Broker, request: Request) -> ApiVersionsResponse:
    if request.parsed.unsupported_version:
        # KIP-511: answered as v0 (Request.respond encodes it so), with the ranges, so the
        # client can retry with a version both sides know.
        return ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=list(_API_KEYS)
        )
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=list(_API_KEYS))
