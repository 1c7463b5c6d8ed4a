"""The final stage of a Dockerfile, read as far as an image's config goes.

pool-base.Dockerfile is the pool image's one definition: a registry build runs it with docker,
and `firepool image build` takes from it what the container runs (USER, ENV, WORKDIR, EXPOSE,
CMD, ENTRYPOINT, LABEL) while its own assembler stands in for the file system instructions
(COPY, RUN, ADD), which it reports so the caller can check it reproduces each one. Anything
else in the final stage (VOLUME, HEALTHCHECK, ARG, ...) would change the image in a way this
builder does not, so it is an error naming its line rather than a silent difference."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from firepool.image.config import ImageConfig
from firepool.image.errors import DockerfileError, DockerfileNotFoundError

#: Every instruction of the Dockerfile reference: anything else is a typo.
KNOWN = frozenset(
    {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
     "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}
)  # fmt: skip
CONFIG_INSTRUCTIONS = frozenset({"CMD", "ENTRYPOINT", "ENV", "EXPOSE", "LABEL", "USER", "WORKDIR"})
FILESYSTEM_INSTRUCTIONS = frozenset({"ADD", "COPY", "RUN"})
#: The environment a `python:*-slim` base gives the final stage (and its `$PATH`).
BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_PORT = re.compile(r"([0-9]{1,5})(?:/(tcp|udp|sctp))?")
_USER = re.compile(r"[0-9]+(?::[0-9]+)?")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def text(self) -> str:
        """The instruction with its whitespace collapsed: how two spellings are compared."""
        return " ".join([self.keyword, *self.args.split()])


@dataclass(frozen=True)
class FinalStage:
    base: str
    config: ImageConfig
    #: Its COPY, RUN and ADD instructions, for the assembler to account for.
    filesystem: tuple[Instruction, ...]


def instructions(text: str, where: str) -> list[Instruction]:
    """The instructions of a Dockerfile's text: continuations joined, comments dropped."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and pending):
            continue  # comment lines, even inside a continuation (as docker reads them)
        if not stripped:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(pending).partition(" ")
        pending = []
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise DockerfileError(f"{where}:{start}: unknown instruction {keyword}")
        found.append(Instruction(keyword, args.strip(), start))
    if pending:
        raise DockerfileError(f"{where}:{start}: the file ends inside a continued line")
    return found


def final_stage(path: Path, base_env: Mapping[str, str] = BASE_ENV) -> FinalStage:
    """The image config of `path`'s last stage, its environment starting from `base_env`."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DockerfileNotFoundError(f"no Dockerfile at {path}", field="dockerfile") from None
    except OSError as exc:
        raise DockerfileError(f"cannot read {path}: {exc}", field="dockerfile") from exc
    found = instructions(text, str(path))
    starts = [i for i, ins in enumerate(found) if ins.keyword == "FROM"]
    if not starts:
        raise DockerfileError(f"{path}: no FROM instruction", field="dockerfile")
    for ins in found[: starts[0]]:
        if ins.keyword != "ARG":
            raise DockerfileError(f"{path}:{ins.line}: {ins.keyword} before the first FROM")
    last = found[starts[-1]]
    image = [word for word in last.args.split() if not word.startswith("--")]
    if not image:
        raise DockerfileError(f"{path}:{last.line}: FROM names no image")
    stage = _Stage(str(path), dict(base_env))
    for ins in found[starts[-1] + 1 :]:
        stage.apply(ins)
    return FinalStage(base=image[0], config=stage.config(), filesystem=tuple(stage.filesystem))


class _Stage:
    """The config as the final stage's instructions build it up, in order."""

    def __init__(self, where: str, env: dict[str, str]) -> None:
        self.where = where
        self.env = env
        self.user: str | None = None
        self.working_dir: str | None = None
        self.cmd: tuple[str, ...] = ()
        self.entrypoint: tuple[str, ...] = ()
        self.ports: list[str] = []
        self.labels: dict[str, str] = {}
        self.filesystem: list[Instruction] = []

    def error(self, ins: Instruction, message: str) -> DockerfileError:
        return DockerfileError(f"{self.where}:{ins.line}: {ins.keyword}: {message}")

    def apply(self, ins: Instruction) -> None:
        if ins.keyword in FILESYSTEM_INSTRUCTIONS:
            self.filesystem.append(ins)
            return
        if ins.keyword not in CONFIG_INSTRUCTIONS:
            raise self.error(ins, "the image builder does not reproduce this instruction")
        if ins.keyword in ("CMD", "ENTRYPOINT"):
            argv = self.exec_form(ins)
            if ins.keyword == "CMD":
                self.cmd = argv
            else:
                self.entrypoint, self.cmd = argv, ()  # as docker: ENTRYPOINT resets CMD
            return
        words = self.words(ins)
        if ins.keyword == "ENV":
            self.env.update(self.pairs(ins, words, _NAME))
        elif ins.keyword == "LABEL":
            self.labels.update(self.pairs(ins, words, _LABEL))
        elif ins.keyword == "USER":
            if len(words) != 1 or not _USER.fullmatch(words[0]):
                raise self.error(ins, "give a numeric uid[:gid] (runAsNonRoot checks numbers)")
            self.user = words[0]
        elif ins.keyword == "WORKDIR":
            if len(words) != 1:
                raise self.error(ins, "give one directory")
            base = self.working_dir or "/"
            self.working_dir = words[0] if words[0].startswith("/") else f"{base}/{words[0]}"
        else:  # EXPOSE
            for word in words:
                port = _PORT.fullmatch(word)
                if port is None:
                    raise self.error(ins, f"{word!r} is not port[/tcp|udp|sctp]")
                self.ports.append(f"{port[1]}/{port[2] or 'tcp'}")

    def exec_form(self, ins: Instruction) -> tuple[str, ...]:
        try:
            argv = json.loads(ins.args)
        except json.JSONDecodeError:
            argv = None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise self.error(
                ins, 'use the JSON form ["program", "arg", ...]: the image has no /bin/sh'
            )
        return tuple(argv)

    def pairs(
        self, ins: Instruction, words: list[str], key_form: re.Pattern[str]
    ) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for word in words:
            key, equals, value = word.partition("=")
            if not equals or not key_form.fullmatch(key):
                raise self.error(ins, f"{word!r}: write KEY=VALUE pairs")
            pairs[key] = value
        return pairs

    def words(self, ins: Instruction) -> list[str]:
        """`ins`'s arguments split as docker splits them: unquoted blanks separate words,
        quotes and backslashes are removed, `$NAME` and `${NAME}` expand (not inside single
        quotes) from the environment as it was before this instruction."""
        words: list[str] = []
        current: list[str] = []
        started = False
        quote: str | None = None
        text = ins.args
        i = 0
        while i < len(text):
            char = text[i]
            if char == "\\" and quote != "'" and i + 1 < len(text):
                current.append(text[i + 1])
                started, i = True, i + 2
                continue
            if quote is None and char in "'\"":
                quote, started, i = char, True, i + 1
                continue
            if char == quote:
                quote, i = None, i + 1
                continue
            if char == "$" and quote != "'":
                match = _VARIABLE.match(text, i)
                if match is not None:
                    name = match[1] if match[1] is not None else match[2]
                    if not _NAME.fullmatch(name):
                        raise self.error(ins, f"${{{name}}}: only $NAME and ${{NAME}} expand")
                    current.append(self.env.get(name, ""))
                    started, i = True, match.end()
                    continue
            if quote is None and char.isspace():
                if started:
                    words.append("".join(current))
                current, started, i = [], False, i + 1
                continue
            current.append(char)
            started, i = True, i + 1
        if quote is not None:
            raise self.error(ins, f"unclosed {quote}")
        if started:
            words.append("".join(current))
        return words

    def config(self) -> ImageConfig:
        return ImageConfig(
            cmd=self.cmd,
            entrypoint=self.entrypoint,
            env=dict(self.env),
            user=self.user,
            working_dir=self.working_dir,
            exposed_ports=tuple(self.ports),
            labels=dict(self.labels),
        )
