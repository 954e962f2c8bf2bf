"""Which addresses a callback may go to: IPv6 addresses that carry a private IPv4 address are
refused like the private address itself, and every address a name resolves to is checked."""

from __future__ import annotations

import ipaddress

import pytest

from nightshift.batch.callbacks import check_callback_url
from nightshift.errors import InvalidInput


@pytest.mark.parametrize(
    ("host", "carried"),
    [
        ("64:ff9b::a00:1", "10.0.0.1 (NAT64)"),
        ("64:ff9b::7f00:1", "127.0.0.1 (NAT64)"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254 (NAT64)"),
        ("64:ff9b:1:a00:1::", "10.0.1.0 (NAT64 /48)"),
        ("2002:c0a8:101::1", "192.168.1.1 (6to4)"),
        ("2002:7f00:1::", "127.0.0.1 (6to4)"),
        ("::10.0.0.1", "10.0.0.1 (IPv4-compatible)"),
        ("::127.0.0.1", "127.0.0.1 (IPv4-compatible)"),
    ],
)
async def test_an_address_carrying_a_private_ipv4_address_is_refused(host: str, carried: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        await check_callback_url(f"http://[{host}]:8080/hook", allow_private=False)
    assert f"which carries {carried}, a loopback, private or reserved address" in refused.value.message
    assert refused.value.field == "callback_url"


@pytest.mark.parametrize(
    "host",
    ["::ffff:10.0.0.1", "::ffff:127.0.0.1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "fe80::1", "::1", "fc00::1"],
)
async def test_private_and_special_ipv6_addresses_are_refused(host: str) -> None:
    with pytest.raises(InvalidInput, match="a loopback, private or reserved address"):
        await check_callback_url(f"https://[{host}]/hook", allow_private=False)


@pytest.mark.parametrize(
    "host", ["64:ff9b::808:808", "2002:808:808::1", "::8.8.8.8", "::ffff:8.8.8.8", "2606:4700::1111", "8.8.8.8"]
)
async def test_addresses_that_carry_a_public_one_are_allowed(host: str) -> None:
    url = f"https://[{host}]/hook" if ":" in host else f"https://{host}/hook"
    target = await check_callback_url(url, allow_private=False)
    assert target.addresses == (ipaddress.ip_address(host),)


async def test_every_address_of_a_name_is_checked_and_kept_for_the_connection() -> None:
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["8.8.8.8", "2002:a00:1::1"]

    with pytest.raises(InvalidInput, match=r"is 2002:a00:1::1, which carries 10\.0\.0\.1 \(6to4\)"):
        await check_callback_url("https://hooks.example/hook", allow_private=False, resolve=resolve)

    async def public(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["8.8.8.8", "8.8.4.4", "8.8.8.8"]

    target = await check_callback_url("http://hooks.example:8080/h", allow_private=False, resolve=public)
    assert [str(a) for a in target.addresses] == ["8.8.8.8", "8.8.4.4"]
    assert asked == [("hooks.example", 443), ("hooks.example", 8080)]


@pytest.mark.parametrize("url", ["ftp://example.com/x", "http:///nohost", "http://example.com:99999/x"])
async def test_what_is_not_an_http_url_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput, match="must be an http or https URL with a host"):
        await check_callback_url(url, allow_private=True)
