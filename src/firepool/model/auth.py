"""Who a request comes from: token roles and the authenticated principal."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TokenRole(StrEnum):
    """What a token may do: a `caller` submits and sees its own jobs and pods; an `admin`
    also changes pools and sees every caller's pods in full."""

    CALLER = "caller"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token authenticates: the caller it acts for and the role it holds."""

    caller: str
    role: TokenRole = TokenRole.CALLER

    @property
    def admin(self) -> bool:
        return self.role is TokenRole.ADMIN
