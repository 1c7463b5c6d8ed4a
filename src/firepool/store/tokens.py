"""Bearer tokens: minted here, kept only as hashes.

Tokens are 256 random bits, so a plain SHA-256 is enough: there is nothing to brute-force
that a salt or a slow hash would protect, and a fast hash keeps uncached validation cheap.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "fp_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
