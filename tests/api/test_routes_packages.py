"""Uploading packages and using them in jobs."""

from __future__ import annotations

import hashlib
import io
import zipfile

from api_harness import Api


def test_upload_dedups_and_the_digest_is_usable(api: Api) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("main.py", "print('hi')\n")
    blob = buffer.getvalue()
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    first = api.alice.post("/v1/packages", content=blob)
    assert first.status_code == 201
    assert first.json() == {"digest": digest, "size": len(blob), "created": True}
    again = api.bob.post("/v1/packages", content=blob)
    assert again.status_code == 200 and again.json()["created"] is False
    assert len(api.packages.blobs()) == 1
    record = api.store.get_package(digest)
    assert record is not None and record.uploaded_by == "alice"
    job = api.alice.post("/v1/jobs", json={"pool": "cpu", "command": ["x"], "package": digest})
    assert job.status_code == 201 and job.json()["spec"]["package"] == digest
