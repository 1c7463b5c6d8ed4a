"""Bearer-token authentication: token -> caller and role, with a validation cache.

Only SHA-256 hashes of tokens are stored. A validated token is cached (by its hash) for
`ttl` seconds, so the hot path of every request is one hash and one dict lookup; a revoked
token therefore stays usable for at most `ttl` seconds. Unknown tokens are cached briefly too,
so a client hammering with a bad token costs the database one lookup per second, not one per
request. The caller and its role always come from here, never from a request body; a
token's role (`caller` or `admin`) is fixed when it is minted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from firepool.model import Principal, TokenRole, UnauthorizedError
from firepool.store import JobStore
from firepool.store.tokens import hash_token, new_token

_MAX_ENTRIES = 100_000


class TokenAuthenticator:
    def __init__(
        self,
        store: JobStore,
        *,
        ttl: float = 60.0,
        negative_ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._clock = clock
        self._cache: dict[str, tuple[Principal | None, float]] = {}
        self.hits = 0
        self.misses = 0

    def cached(self, authorization: str | None) -> Principal | None:
        """The token's principal from the cache, or None when the store must be asked.
        Raises for a missing, malformed or recently refused token."""
        token = _bearer(authorization)
        digest = hash_token(token)
        entry = self._cache.get(digest)
        if entry is not None and entry[1] > self._clock():
            self.hits += 1
            if entry[0] is None:
                raise UnauthorizedError("unknown or revoked token", field="Authorization")
            return entry[0]
        return None

    def lookup(self, authorization: str | None) -> str:
        """The caller for this Authorization header value; asks the store on a cache miss."""
        return self.principal(authorization).caller

    def principal(self, authorization: str | None) -> Principal:
        """The caller and role for this Authorization header value (store on a cache miss)."""
        hit = self.cached(authorization)
        if hit is not None:
            return hit
        digest = hash_token(_bearer(authorization))
        self.misses += 1
        found = self._store.principal_for_token(digest)
        if len(self._cache) >= _MAX_ENTRIES:
            self._cache.clear()
        ttl = self._ttl if found is not None else self._negative_ttl
        self._cache[digest] = (found, self._clock() + ttl)
        if found is None:
            raise UnauthorizedError("unknown or revoked token", field="Authorization")
        return found

    def forget(self, token: str) -> None:
        self._cache.pop(hash_token(token), None)


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise UnauthorizedError("missing bearer token", field="Authorization")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        raise UnauthorizedError("expected 'Authorization: Bearer <token>'", field="Authorization")
    return token


def issue_token(
    store: JobStore,
    caller: str,
    *,
    now: float | None = None,
    role: TokenRole = TokenRole.CALLER,
) -> str:
    """Mint a token for `caller` (created on first use) with `role`; the clear token is
    returned once."""
    token = new_token()
    store.add_token(caller, hash_token(token), now=time.time() if now is None else now, role=role)
    return token
