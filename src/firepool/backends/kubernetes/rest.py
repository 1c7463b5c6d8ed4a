"""A thin JSON layer over the official client's `ApiClient`: auth, TLS and kubeconfig from the
library, request bodies and answers as plain dicts.

Why not the generated `CoreV1Api` methods: since client 35 they validate every argument and
answer with pydantic models, which costs more than the API call itself at ten thousand pods
and drops fields the models do not know; the backend reads a few fields of raw JSON anyway.
Every method is blocking (the official client is synchronous); the backend runs them on its
own thread pool, so the broker's event loop never waits on the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from firepool.backends.kubernetes.errors import from_status, map_exception
from firepool.model import ConfigError

_IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
#: The client releases this module is written against, as pyproject.toml pins them: 37.x is
#: the first whose ApiClient has `param_serialize` and the `call_api` that takes its output;
#: with an older one every call would fail with an AttributeError, read as a flaky API.
CLIENT_RANGE = (37, 38)


def check_client(version: str) -> None:
    """Refuse a client release outside CLIENT_RANGE with a typed, non-retryable error."""
    low, high = CLIENT_RANGE
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = -1
    if not low <= major < high:
        raise ConfigError(
            f"the kubernetes client {version} is not supported: firepool's Kubernetes backend "
            f"needs kubernetes>={low},<{high} (pip install 'kubernetes>={low},<{high}')",
            field="kubernetes",
        )


def load_configuration(
    kubeconfig: str | None, context: str | None, pool_size: int
) -> k8s_client.Configuration:
    """In-cluster config inside a pod (unless a kubeconfig is named), else the kubeconfig."""
    configuration = k8s_client.Configuration()
    try:
        if (
            kubeconfig is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and os.path.exists(_IN_CLUSTER_TOKEN)
        ):
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (k8s_config.ConfigException, OSError, ValueError, TypeError) as err:
        raise ConfigError(f"cannot load Kubernetes config: {err}", field="kubeconfig") from None
    configuration.connection_pool_maxsize = pool_size
    return configuration


class Rest:
    def __init__(self, configuration: k8s_client.Configuration) -> None:
        check_client(metadata.version("kubernetes"))
        self.api = k8s_client.ApiClient(configuration)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] = 30.0,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(*request, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One call; its JSON answer, or a typed BackendError for any failure."""
        try:
            response = self._send(method, path, query=query, body=body, content_type=content_type)
            data = response.read()
        except Exception as exc:  # transport and client errors, typed like any other failure
            raise map_exception(exc, what) from None
        if not 200 <= response.status <= 299:
            raise from_status(response.status, data, what, response.headers)
        parsed = json.loads(data) if data else {}
        return parsed if isinstance(parsed, dict) else {}

    def watch(
        self, path: str, query: list[tuple[str, str]], timeout_s: int, silence_s: float = 30.0
    ) -> tuple[Any, Iterator[dict[str, Any]]]:
        """Open a watch stream; returns (the raw response, to close it) and its events. A read
        that waits longer than the server's own timeout plus `silence_s` fails: the connection
        was dropped without a word."""
        try:
            response = self._send(
                "GET", path, query=[*query, ("watch", "true")],
                timeout=(10.0, timeout_s + silence_s),
            )  # fmt: skip
        except Exception as exc:
            raise map_exception(exc, "watch pods") from None
        if not 200 <= response.status <= 299:
            data = response.read()
            raise from_status(response.status, data, "watch pods")
        raw = response.response
        return WatchStream(raw), _lines(raw)


class WatchStream:
    """An open watch response that another thread can close at once. Closing the response
    alone waits for the reader's lock, held by the watch thread's blocking read until the
    server next speaks (a minute, with bookmarks); shutting the socket down first ends that
    read now."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        connection = getattr(raw, "_connection", None)
        self._socket: socket.socket | None = getattr(connection, "sock", None)

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        self._raw.close()

    def release_conn(self) -> None:
        self._raw.release_conn()


def _lines(raw: Any) -> Iterator[dict[str, Any]]:
    """Newline-delimited JSON events of a watch response."""
    pending = b""
    for chunk in raw.stream(65536, decode_content=True):
        pending += chunk
        while True:
            cut = pending.find(b"\n")
            if cut < 0:
                break
            line, pending = pending[:cut], pending[cut + 1 :]
            if line.strip():
                event = json.loads(line)
                if isinstance(event, dict):
                    yield event
    if pending.strip():
        event = json.loads(pending)
        if isinstance(event, dict):
            yield event
