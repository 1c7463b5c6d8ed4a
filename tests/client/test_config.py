"""Where the clients find the broker: argument, then environment, then the local server's
files in the data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.client import Client, local_defaults, resolve
from firepool.client.config import default_data_dir
from firepool.model import ConfigError
from firepool.testing.broker import LiveBroker


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FIREPOOL_URL", "FIREPOOL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FIREPOOL_DATA_DIR", str(tmp_path / "nowhere"))


def test_arguments_beat_environment_beats_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "url").write_text("http://files:1/\n")
    (data / "token").write_text("fp_file\n")
    assert local_defaults(data).url == "http://files:1/"
    assert resolve(data_dir=data).url == "http://files:1"  # trailing slash dropped
    monkeypatch.setenv("FIREPOOL_URL", "http://env:2")
    assert resolve(data_dir=data) == resolve("http://env:2", "fp_file", data_dir=data)
    monkeypatch.setenv("FIREPOOL_TOKEN", "fp_env")
    assert resolve(data_dir=data).token == "fp_env"
    assert resolve("http://arg:3", "fp_arg", data_dir=data).token == "fp_arg"


def test_data_dir_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FIREPOOL_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("FIREPOOL_DATA_DIR")
    assert default_data_dir() == Path.home() / ".local" / "share" / "firepool"


def test_no_url_anywhere_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        Client()
    assert caught.value.field == "url" and "FIREPOOL_URL" in caught.value.message
    assert local_defaults() == local_defaults(Path("/nonexistent"))


def test_a_local_server_is_found_without_settings(
    broker: LiveBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.write_local_defaults("alice")
    monkeypatch.setenv("FIREPOOL_DATA_DIR", str(broker.data_dir))
    with Client() as client:
        assert client.submit("cpu", ["x"]).id == client.list()[0].id
