"""Request body caps, enforced before a route reads the body.

A pure ASGI middleware (no per-request task or buffering): a declared Content-Length over
the cap is refused at once, and a body sent without one is counted as it streams and cut off
at the cap. Uploads under `/v1/packages` get the package cap; every other route the JSON cap.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from firepool.api.errors import error_response
from firepool.model import ErrorCode

DEFAULT_JSON_BYTES = 4 * 1024 * 1024


class BodyLimit:
    def __init__(self, app: ASGIApp, *, json_bytes: int, upload_bytes: int) -> None:
        self.app = app
        self.json_bytes = json_bytes
        self.upload_bytes = upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope["path"].startswith("/v1/packages")
        cap = self.upload_bytes if upload else self.json_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > cap:
                    await self._refuse(scope, receive, send, cap)
                    return
        seen = 0
        over = False
        replaced = False

        async def counting_receive() -> Message:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    # Stop feeding the app. Whatever it answers (a framework may turn a cut
                    # body into its own 400), the client gets our 413 instead.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal replaced
            if not over:
                await send(message)
            elif not replaced and message["type"] == "http.response.start":
                replaced = True
                await self._refuse(scope, receive, send, cap)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not over:
                raise
            if not replaced:
                await self._refuse(scope, receive, send, cap)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, cap: int) -> None:
        response = error_response(
            ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds {cap} bytes", "body"
        )
        response.headers["Connection"] = "close"
        await response(scope, receive, send)
