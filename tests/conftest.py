"""Fixtures the tests of more than one folder use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servers import s3_bucket, s3_server


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """A local S3 endpoint (moto, on loopback) shared by a test module's tests."""
    with s3_server() as url:
        yield url


@pytest.fixture
def bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket of its own on ``endpoint``, with moto's test credentials set."""
    return s3_bucket(endpoint, monkeypatch, "bucket")


@pytest.fixture
def icechunk_gets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys asked of icechunk's store (``IcechunkStore.get``) during the test: clear the
    list to count from a later moment."""
    import icechunk

    asked: list[str] = []
    get = icechunk.IcechunkStore.get

    async def counted(self, key, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(key)
        return await get(self, key, *args, **kwargs)

    monkeypatch.setattr(icechunk.IcechunkStore, "get", counted)
    return asked
