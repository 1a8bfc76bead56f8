"""URLs in messages: credentials are hidden also in what does not parse as a URL, and a URL
that does not parse is a usage error (or a broken link of an index), never a traceback."""

from __future__ import annotations

import pytest

from core.errors import IndexReadError, UsageError
from core.urls import (
    check_fetch_url,
    check_index_url,
    redact,
    redact_text,
    same_origin,
    split_credentials,
)

SECRET = "s3cr3t-t0ken"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://user:{SECRET}@host/simple/", "https://***@host/simple/"),
        (f"https//user:{SECRET}@host/simple/", "https//***@host/simple/"),  # no ':' after https
        (f"user:{SECRET}@host/simple/", "***@host/simple/"),  # no scheme at all
        (f"https:user:{SECRET}@host/", "***@host/"),
        (f"https://u:{SECRET}@host:99999/", "https://***@host:99999/"),  # a bad port
        (f"https://u:{SECRET}@[::1/", "https://***@[::1/"),  # an unclosed IPv6 host
        (f"https://u:{SECRET}@[::zz]/", "https://***@[::zz]/"),
        (f"https://u:{SECRET}/with-slash@host/", "https://***@host/"),  # a raw '/' in it
        (f"https://u:{SECRET} space@host/", "https://u:*** ***@host/"),
        (f"u:{SECRET}@host//simple/", "***@host//simple/"),
        (f"https://user:{SECRET}/host/", "https://user:***/host/"),  # the '@' was forgotten
        (f"pypi=https://u:{SECRET}@host/", "pypi=https://***@host/"),
        (f"torch @ https://u:{SECRET}@host/t.whl", "torch @ https://***@host/t.whl"),
        # nothing to hide: readable as it was
        ("https://host/simple/", "https://host/simple/"),
        ("http://127.0.0.1:80vendor/simple/", "http://127.0.0.1:80vendor/simple/"),
        ("https://[::1]/simple/", "https://[::1]/simple/"),
        ("https://[::1]:8443/simple/", "https://[::1]:8443/simple/"),
        ("torch @ https://host/t.whl", "torch @ https://host/t.whl"),
        ("torch@https://host/t.whl", "torch@https://host/t.whl"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_redact_text_hides_userinfo_of_urls_only() -> None:
    text = (
        f"failed: 'https://u:{SECRET}@h/x' (git+ssh://git@github.com/o/r) "
        "vllm-musa:0.28.0@sha256:abcd e@mail.example git@github.com:o/r"
    )
    assert redact_text(text) == (
        "failed: 'https://***@h/x' (git+ssh://***@github.com/o/r) "
        "vllm-musa:0.28.0@sha256:abcd e@mail.example git@github.com:o/r"
    )


HINT = (
    "write an index URL as https://HOST[:PORT]/PATH/, with any credentials as USER:TOKEN@ "
    "before HOST"
)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"https://u:{SECRET}@host:99999/", "https://***@host:99999/ is not a valid URL (its port "
         "is not a number from 0 to 65535)"),
        (f"https://u:{SECRET}@host:port/", "https://***@host:port/ is not a valid URL (its port "
         "is not a number from 0 to 65535)"),
        (f"https://u:{SECRET}@[::1/", "https://***@[::1/ is not a valid URL (its [IPv6] host is "
         "not closed or is not an address)"),
        (f"https//u:{SECRET}@host/", "https//***@host/ is not a URL (it does not start with "
         "https:// or http://)"),
        (f"u:{SECRET}@host/", "***@host/ is not a URL (it does not start with https:// or "
         "http://)"),
    ],
)  # fmt: skip
def test_a_typo_in_a_credentialed_index_url_is_a_usage_error(url: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        check_index_url("vendor", url)
    assert info.value.message == f"index vendor: {message}"
    assert info.value.hint == HINT
    if "not a valid URL" in message:  # what does not parse is refused when it is split, too
        with pytest.raises(UsageError) as split:
            split_credentials(url, name="vendor")
        assert (split.value.message, split.value.hint) == (info.value.message, HINT)
    else:  # no scheme://: no credentials to split off, and check_index_url refuses it
        assert split_credentials(url, name="vendor") == (url, None)


def test_split_credentials_of_a_good_url() -> None:
    assert split_credentials(f"https://u:{SECRET}@[::1]:8443/simple/") == (
        "https://[::1]:8443/simple/",
        ("u", SECRET),
    )


def test_a_broken_file_url_of_an_index_is_its_error() -> None:
    with pytest.raises(IndexReadError) as info:
        check_fetch_url("pypi", "https://[::1/files/x.whl")
    assert info.value.message == (
        "index pypi: https://[::1/files/x.whl is not a valid URL (its [IPv6] host is not closed "
        "or is not an address); refusing to fetch it"
    )
    assert not same_origin("https://[::1/", "https://[::1/")
    assert same_origin("https://h/a", "https://h:443/b")


def test_credentials_in_an_index_url_are_percent_decoded_as_pip_reads_them() -> None:
    assert split_credentials("https://build%2Dbot:p%40ss%3Aw%2Frd@host/simple/") == (
        "https://host/simple/",
        ("build-bot", "p@ss:w/rd"),
    )
    assert redact("https://user:p%40ss@host/simple/") == "https://***@host/simple/"
