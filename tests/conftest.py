"""Fixtures the tests of more than one folder use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accumulus.decoded_chunks import DECODED
from servers import s3_bucket, s3_server


@pytest.fixture(autouse=True)
def no_decoded_chunks_kept() -> None:
    """Each test starts with its process's cache of decoded chunks empty and off: a service
    an earlier test made in the same process (``create_app`` sizes the cache) must not
    serve a later test's reads, whose counts would then depend on the order tests run in."""
    DECODED.share(None)
    DECODED.set_limit(0)


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
