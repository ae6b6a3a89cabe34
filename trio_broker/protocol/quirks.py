"""What Kafka's message definitions cannot say: the protocol's hand-written exceptions.

Everything else in the codec is generated from the JSON in kafka-protocol/messages; the
rules here are the ones Kafka implements in code (RequestContext, RequestHeader,
ApiVersionsResponse), each citing the spec file it departs from.

1. Header versions are not in the message files. A request uses RequestHeader v2 when its
   body version is flexible, else v1; a response uses ResponseHeader v1 when flexible,
   else v0 (RequestHeader.json, ResponseHeader.json).
2. ApiVersions responses always use ResponseHeader v0, even when flexible, so a client that
   does not yet know the broker's versions can read the error code
   (ApiVersionsResponse.json, "Tagged fields are only supported in the body").
3. An ApiVersions request of a version the broker does not know is answered, not refused:
   with a v0 response carrying UNSUPPORTED_VERSION and the supported ranges (KIP-511). Its
   body is not decoded: it may be of a layout newer than this broker.
4. The client id in the request header is never a compact string, even in header v2
   (RequestHeader.json, `"flexibleVersions": "none"` on ClientId); the generator honours
   that field attribute, so nothing is needed here beyond reading the header through it.
5. Any other request of a version the broker does not serve is decoded when its message
   file defines that version, so that the handler can answer UNSUPPORTED_VERSION in the
   shape the client reads (apis/unsupported.py); a version no file defines cannot be read,
   and the connection is closed, as Kafka closes it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from trio_broker.protocol._generated import request_class, response_class
from trio_broker.protocol._generated.request_header import RequestHeader
from trio_broker.protocol._generated.response_header import ResponseHeader
from trio_broker.protocol.primitives import skip_tagged_fields

__all__ = [
    "API_VERSIONS_KEY",
    "InvalidRequest",
    "api_name",
    "ParsedRequest",
    "encode_response",
    "parse_request",
]

API_VERSIONS_KEY = 18
_KEY_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")


class InvalidRequest(Exception):
    """A request the broker cannot read; Kafka closes the connection (RequestContext)."""


class ParsedRequest:
    """A request frame decoded: header fields and body. (A plain slotted class: one is made
    per request, and attrs' frozen __init__ costs a microsecond more.)"""

    __slots__ = (
        "api_key",
        "api_version",
        "body",
        "client_id",
        "correlation_id",
        "unsupported_version",
    )

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        body: Any,  # the decoded request, or None for an ApiVersions of an unknown version
        unsupported_version: bool = False,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body = body
        self.unsupported_version = unsupported_version

    @property
    def header(self) -> RequestHeader:
        """The request header (no version of it has a field beyond these four)."""
        return RequestHeader(
            request_api_key=self.api_key,
            request_api_version=self.api_version,
            correlation_id=self.correlation_id,
            client_id=self.client_id,
        )

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ParsedRequest({fields})"


def _is_flexible(cls: type, version: int) -> bool:
    first = cls.FLEXIBLE_MIN_VERSION
    return first is not None and version >= first


# The hot path: header fields read in place, and the body by its version's generated
# decoder called directly. (api key, version) -> (decoder, flexible), or None where the
# message file has no such version. Anything unusual (a short frame, a version not served,
# bytes that fail to decode) takes the general path below, which raises what it always did.
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_BODY_DECODERS: dict[tuple[int, int], tuple[Any, bool] | None] = {}


def _body_decoder(api_key: int, api_version: int) -> tuple[Any, bool] | None:
    key = (api_key, api_version)
    if key not in _BODY_DECODERS:
        try:
            cls = request_class(api_key)
        except KeyError:
            entry = None
        else:
            fn = cls._DECODERS.get(api_version)
            if fn is not None and api_key == 0:
                # Small produces: their common shape in one step (protocol/produce_codec.py).
                from trio_broker.protocol.produce_codec import produce_request_decoder

                fn = produce_request_decoder(api_version)
            elif fn is not None and api_key == 1:
                # A tailing consumer's fetches (protocol/fetch_codec.py).
                from trio_broker.protocol.fetch_codec import fetch_request_decoder

                fn = fetch_request_decoder(api_version)
            entry = None if fn is None else (fn, _is_flexible(cls, api_version))
        _BODY_DECODERS[key] = entry
    return _BODY_DECODERS[key]


def parse_request(frame: memoryview, supported: Mapping[int, tuple[int, int]]) -> ParsedRequest:
    """Decode one frame (without its size prefix) into header and body.

    `supported` maps api key -> (min, max) version this broker serves. Anything else
    raises InvalidRequest, except quirks 3 and 5 (`unsupported_version` set).
    """
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    end = len(frame)
    if end >= 10:
        api_key, api_version, correlation_id, size = _HEADER.unpack_from(frame, 0)
        versions = supported.get(api_key)
        if versions is not None and versions[0] <= api_version <= versions[1]:
            decoder = _BODY_DECODERS.get((api_key, api_version)) or _body_decoder(
                api_key, api_version
            )
            pos = 10 + size if size >= 0 else 10
            if decoder is not None and pos <= end and size >= -1:  # quirk 4: not compact
                decode, flexible = decoder
                try:
                    client_id = str(frame[10:pos], "utf-8") if size >= 0 else None
                    if flexible:  # quirk 1: header v2, whose tagged fields none are known
                        pos = pos + 1 if frame[pos] == 0 else skip_tagged_fields(frame, pos)
                    body, _ = decode(frame, pos)
                except Exception:
                    pass  # the general path says what is wrong
                else:
                    return ParsedRequest(api_key, api_version, correlation_id, client_id, body)
    return _parse_request(frame, supported)


def _parse_request(frame: memoryview, supported: Mapping[int, tuple[int, int]]) -> ParsedRequest:
    if len(frame) < 8:
        raise InvalidRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    versions = supported.get(api_key)
    if versions is None:
        raise InvalidRequest(f"unsupported api key {api_key}")
    lo, hi = versions
    if not lo <= api_version <= hi:
        if api_key == API_VERSIONS_KEY:
            # Quirk 3: read only the fixed v1 header part, never the unknown body.
            try:
                header, _ = RequestHeader.decode(frame, 1)
            except ValueError as exc:
                raise InvalidRequest(f"bad request header: {exc}") from None
            return ParsedRequest(
                api_key, api_version, header.correlation_id, header.client_id, None, True
            )
        cls = request_class(api_key)
        if not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
            # Quirk 5: no layout to read it by, so no answer the client could match.
            raise InvalidRequest(
                f"unsupported version {api_version} of {api_name(api_key)} (api key "
                f"{api_key}): this broker serves v{lo}-v{hi} and knows no layout of "
                f"v{api_version}"
            )
        return _decode(cls, frame, api_key, api_version, unsupported=True)
    return _decode(request_class(api_key), frame, api_key, api_version, unsupported=False)


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("Produce"), for log lines."""
    return request_class(api_key).__name__.removesuffix("Request")


def _decode(
    cls: type, frame: memoryview, api_key: int, api_version: int, *, unsupported: bool
) -> ParsedRequest:
    header_version = 2 if _is_flexible(cls, api_version) else 1  # quirk 1
    try:
        header, pos = RequestHeader.decode(frame, header_version)
        body, end = cls.decode(frame, api_version, pos)
    except ValueError as exc:
        raise InvalidRequest(f"cannot decode api key {api_key} v{api_version}: {exc}") from None
    return ParsedRequest(
        api_key, api_version, header.correlation_id, header.client_id, body, unsupported
    )


# The hot path of encoding: (api key, version) -> (response class, its version's generated
# encoder, whether the header has tagged fields), so that an answer costs no lookups.
_HEAD = struct.Struct(">ii")  # size (filled in last), correlation id
_RESPONSE_ENCODERS: dict[tuple[int, int], tuple[type, Any, bool]] = {}


def _response_encoder(api_key: int, api_version: int) -> tuple[type, Any, bool]:
    cls = response_class(api_key)
    flexible = _is_flexible(cls, api_version) and api_key != API_VERSIONS_KEY  # quirks 1, 2
    encode = cls._ENCODERS.get(api_version)
    if encode is not None and api_key == 0:
        # Small produces' answers in one step (protocol/produce_codec.py).
        from trio_broker.protocol.produce_codec import produce_response_encoder

        encode = produce_response_encoder(api_version)
    elif encode is not None and api_key == 1:
        # A tailing consumer's answers (one topic, one partition) in one step
        # (protocol/fetch_codec.py).
        from trio_broker.protocol.fetch_codec import fetch_response_encoder

        encode = fetch_response_encoder(api_version)
    entry = _RESPONSE_ENCODERS[(api_key, api_version)] = (cls, encode, flexible)
    return entry


def encode_response(
    api_key: int, api_version: int, correlation_id: int, response: Any
) -> tuple[bytearray, list[tuple[int, Any]]]:
    """Encode a response frame: size prefix, header, body.

    Returns the bytes and the file regions to splice in (offset into the bytes, region),
    as the generated encoder records them for `records` fields that are file regions.
    """
    entry = _RESPONSE_ENCODERS.get((api_key, api_version)) or _response_encoder(
        api_key, api_version
    )
    cls, encode, flexible = entry
    if encode is not None and response.__class__ is cls:
        buf = bytearray(_HEAD.pack(0, correlation_id))
        if flexible:
            buf.append(0)  # ResponseHeader v1: no tagged fields
        regions: list[tuple[int, Any]] = []
        try:
            encode(response, buf, regions)
        except Exception:
            # The general path raises what it always did (Message.encode's ValueError).
            return _encode_response(api_key, api_version, correlation_id, response)
        size = len(buf) - 4
        if regions:
            size += sum(region.size for _, region in regions)
        _SIZE.pack_into(buf, 0, size)
        return buf, regions
    return _encode_response(api_key, api_version, correlation_id, response)


def _encode_response(
    api_key: int, api_version: int, correlation_id: int, response: Any
) -> tuple[bytearray, list[tuple[int, Any]]]:
    buf = bytearray(4)
    regions: list[tuple[int, Any]] = []
    flexible = _is_flexible(response_class(api_key), api_version)
    header_version = 1 if flexible and api_key != API_VERSIONS_KEY else 0  # quirks 1, 2
    ResponseHeader(correlation_id=correlation_id).encode(header_version, buf)
    response.encode(api_version, buf, regions)
    size = len(buf) - 4 + sum(region.size for _, region in regions)
    _SIZE.pack_into(buf, 0, size)
    return buf, regions
