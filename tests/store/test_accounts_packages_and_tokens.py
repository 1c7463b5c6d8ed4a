from __future__ import annotations

from firepool.model import Principal, TokenRole
from firepool.store import JobStore
from firepool.store.tokens import hash_token, new_token

DIGEST = "sha256:" + "ab" * 32


def test_packages_keep_their_first_record(store: JobStore) -> None:
    assert store.get_package(DIGEST) is None
    first = store.add_package(DIGEST, 123, caller="alice", now=1.0)
    again = store.add_package(DIGEST, 123, caller="bob", now=2.0)
    assert again == first
    assert store.get_package(DIGEST) == first
    assert (first.size, first.uploaded_by) == (123, "alice")


def test_tokens_are_stored_hashed_and_revocable(store: JobStore) -> None:
    token = new_token()
    digest = hash_token(token)
    store.add_token("alice", digest, now=1.0)
    store.add_token("alice", hash_token(new_token()), now=2.0)  # a second token, same caller
    assert store.caller_for_token(digest) == "alice"
    assert store.caller_for_token(token) is None  # the clear token is never a key
    store.revoke_token(digest)
    assert store.caller_for_token(digest) is None


def test_tokens_carry_a_role_callers_by_default(store: JobStore) -> None:
    plain, admin = hash_token(new_token()), hash_token(new_token())
    store.add_token("alice", plain, now=1.0)
    store.add_token("root", admin, now=1.0, role=TokenRole.ADMIN)
    assert store.principal_for_token(plain) == Principal("alice", TokenRole.CALLER)
    assert store.principal_for_token(admin) == Principal("root", TokenRole.ADMIN)
    assert store.caller_for_token(admin) == "root"
    store.revoke_token(admin)
    assert store.principal_for_token(admin) is None
