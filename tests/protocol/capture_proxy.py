"""A recording TCP proxy: forwards clients to a broker and keeps every request frame they sent.

Plain threads and blocking sockets, because the clients driven through it (kafka-python,
confluent-kafka) are blocking too and the broker runs on its own thread. The listening
socket is bound in the constructor, so its port is known before the broker starts and the
broker can advertise it (`advertised.listeners`): clients then reconnect through the proxy
after the bootstrap Metadata instead of going to the broker directly.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any

import attrs
from wire import split_frames

__all__ = ["CapturedFrame", "RecordingProxy"]

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")


@attrs.frozen(kw_only=True)
class CapturedFrame:
    """One client->broker request, without its int32 size prefix."""

    connection: int
    data: bytes

    @property
    def api_key(self) -> int:
        return _KEY_VERSION.unpack_from(self.data, 0)[0]

    @property
    def api_version(self) -> int:
        return _KEY_VERSION.unpack_from(self.data, 0)[1]


class RecordingProxy:
    """`with RecordingProxy() as proxy: proxy.forward_to(host, port)`; then `proxy.frames`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._listener = socket.create_server((host, 0))
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._upstream: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._frames: list[CapturedFrame] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def frames(self) -> list[CapturedFrame]:
        with self._lock:
            return list(self._frames)

    def forward_to(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._spawn(self._accept_loop)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="capture-proxy")
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._upstream is not None
        connection = 0
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # listener closed
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            connection += 1
            with self._lock:
                self._sockets += [client, server]
            self._spawn(self._pump_requests, connection, client, server)
            self._spawn(self._pump, server, client)

    def _pump_requests(self, connection: int, src: socket.socket, dst: socket.socket) -> None:
        pending = bytearray()
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
                pending += chunk
                frames = [
                    CapturedFrame(connection=connection, data=f) for f in split_frames(pending)
                ]
                if frames:
                    with self._lock:
                        self._frames += frames
        except OSError:
            pass
        finally:
            self._shutdown(dst)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._shutdown(dst)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        # Half-close so the peer sees EOF the way it would without the proxy.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # shutdown() wakes the thread blocked in accept(); close() alone does not on Linux.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
