"""Where the SDK and the CLI find the broker: arguments, then the environment, then the files
`firepool serve --data-dir DIR` leaves behind.

The local fallback exists so that `firepool serve` in one terminal and `firepool run ...` (or a
script with `firepool.Client()`) in another just work, with no token to copy: the server writes
`DIR/url` and `DIR/token`, and this module reads them. The data directory is
`$FIREPOOL_DATA_DIR`, else `~/.local/share/firepool`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from firepool.model import ConfigError

URL_ENV = "FIREPOOL_URL"
TOKEN_ENV = "FIREPOOL_TOKEN"
DATA_DIR_ENV = "FIREPOOL_DATA_DIR"
URL_FILE = "url"
TOKEN_FILE = "token"


@dataclass(frozen=True, slots=True)
class LocalDefaults:
    """What a local `firepool serve` published; either may be missing."""

    url: str | None
    token: str | None


@dataclass(frozen=True, slots=True)
class ClientConfig:
    url: str
    token: str | None


def default_data_dir() -> Path:
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".local" / "share" / "firepool"


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    return text or None


def local_defaults(data_dir: str | os.PathLike[str] | None = None) -> LocalDefaults:
    """The broker URL and caller token a local server wrote to `data_dir` (default: see the
    module docstring). The service writes these files; the clients only read them."""
    root = default_data_dir() if data_dir is None else Path(data_dir).expanduser()
    return LocalDefaults(url=_read(root / URL_FILE), token=_read(root / TOKEN_FILE))


def resolve(
    url: str | None = None,
    token: str | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> ClientConfig:
    """Each setting from the first place that has it: argument, environment, local files."""
    url = url or os.environ.get(URL_ENV) or None
    token = token or os.environ.get(TOKEN_ENV) or None
    if url is None or token is None:
        local = local_defaults(data_dir)
        url = url or local.url
        token = token or local.token
    if url is None:
        where = Path(data_dir) if data_dir is not None else default_data_dir()
        raise ConfigError(
            f"no broker URL: pass url=..., set {URL_ENV}, or start `firepool serve` "
            f"(it writes {where / URL_FILE})",
            field="url",
        )
    return ClientConfig(url=url.rstrip("/"), token=token)
