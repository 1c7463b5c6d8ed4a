"""pool-base.Dockerfile's final stage read as an image config, and a Dockerfile the builder
would reproduce wrongly refused with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.backends.kubernetes.settings import KubernetesSettings
from firepool.backends.kubernetes.spec import POD_DIR, RENDEZVOUS_PORT, RUN_AS_USER
from firepool.image import DockerfileError, DockerfileNotFoundError
from firepool.image.build import checkout_dockerfile
from firepool.image.dockerfile import BASE_ENV, final_stage


def dockerfile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return path


def test_the_shipped_final_stage_is_what_the_pod_spec_expects() -> None:
    stage = final_stage(checkout_dockerfile())
    config = stage.config
    assert config.user == f"{RUN_AS_USER}:{RUN_AS_USER}"
    assert config.working_dir == POD_DIR
    port = KubernetesSettings().agent_port
    assert config.exposed_ports == (f"{port}/tcp", f"{RENDEZVOUS_PORT}/tcp")
    assert config.env["PATH"] == "/opt/firepool/bin:" + BASE_ENV["PATH"]
    assert config.env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert config.cmd[:3] == ("python", "-m", "firepool.agent")
    assert [i.keyword for i in stage.filesystem] == ["COPY", "RUN"]


def test_continuations_comments_quotes_and_expansion(tmp_path: Path) -> None:
    path = dockerfile(
        tmp_path,
        """\
# syntax=docker/dockerfile:1
ARG VERSION=1
FROM python:3.11 AS build
RUN echo build stage: anything goes here
HEALTHCHECK CMD ["true"]
FROM --platform=linux/amd64 python:3.11-slim
ENV A=one \\
# a comment inside the continuation
    B="two words" C='$A' D=$A E=\\$A
ENV A=1 F=${A}-$A
WORKDIR /srv
WORKDIR app
USER 10001
EXPOSE 80 53/udp
LABEL org.example.role=pool
ENTRYPOINT ["tini", "--"]
CMD ["python", "-c", "print(1)"]
""",
    )
    stage = final_stage(path, base_env={})
    config = stage.config  # one ENV's pairs expand from the environment before it (docker's rule)
    assert stage.base == "python:3.11-slim"
    assert dict(config.env) == {
        "A": "1", "B": "two words", "C": "$A", "D": "", "E": "$A", "F": "one-one",
    }  # fmt: skip
    assert config.working_dir == "/srv/app"
    assert config.user == "10001"
    assert config.exposed_ports == ("80/tcp", "53/udp")
    assert config.labels == {"org.example.role": "pool"}
    assert config.argv() == ("tini", "--", "python", "-c", "print(1)")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("FROBNICATE now", "unknown instruction FROBNICATE"),
        ('HEALTHCHECK CMD ["true"]', "does not reproduce"),
        ("VOLUME /data", "does not reproduce"),
        ("ARG X=1", "does not reproduce"),
        ("CMD python -m firepool.agent", "JSON form"),
        ("USER firepool", "numeric"),
        ("ENV PATH /bin", "KEY=VALUE"),
        ("ENV X=${Y:-z}", "only \\$NAME"),
        ("EXPOSE http", "port"),
        ("ENV X='open", "unclosed"),
    ],
)
def test_what_the_builder_cannot_reproduce_is_an_error_naming_its_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = dockerfile(tmp_path, f"FROM scratch\nUSER 10001\n{line}\n")
    with pytest.raises(DockerfileError, match=message) as caught:
        final_stage(path)
    assert f"{path}:3" in caught.value.message


def test_a_file_without_from_or_with_a_dangling_continuation(tmp_path: Path) -> None:
    with pytest.raises(DockerfileError, match="no FROM"):
        final_stage(dockerfile(tmp_path, 'CMD ["x"]\n'.replace("CMD", "# CMD")))
    with pytest.raises(DockerfileError, match="before the first FROM"):
        final_stage(dockerfile(tmp_path, 'CMD ["x"]\nFROM scratch\n'))
    with pytest.raises(DockerfileError, match="continued line"):
        final_stage(dockerfile(tmp_path, "FROM scratch\nENV A=1 \\\n"))


def test_a_missing_dockerfile_is_its_own_error(tmp_path: Path) -> None:
    with pytest.raises(DockerfileNotFoundError) as caught:
        final_stage(tmp_path / "nope.Dockerfile")
    assert caught.value.field == "dockerfile"
