"""Who may use ``sandbox serve --http``: a bearer token, OAuth access tokens (JWTs checked
against the issuer's keys), and the same over TLS. No key, certificate or issuer leaves
this machine: the issuer's keys are a file, the certificate is made here."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import time
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from sandbox import plane

from .http_client import INITIALIZE, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TOKEN = "a-bearer-token-of-32-characters!"
ISSUER = "https://issuer.example"


async def initialize(url: str, headers: dict[str, str], **options: Any) -> httpx2.Response:
    """An initialize request with ``headers`` (``options`` go to httpx2)."""
    async with httpx2.AsyncClient(timeout=30, **options) as client:
        return await client.post(
            url,
            content=json.dumps(INITIALIZE).encode(),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
async def test_a_bearer_token_lets_in_whoever_has_it(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    async with http_server("--token-file", str(secret)) as (url, _):
        for headers in ({}, bearer("not-the-token-but-as-long-as-it!"), bearer(TOKEN[:-1])):
            refused = await initialize(url, headers)
            assert refused.status_code == 401, headers
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert (await initialize(url, bearer(TOKEN))).status_code == 200
        async with plane.Remote.connect(plane.http(url, token=TOKEN)) as remote:
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "t"}))
            assert r.data == "T"
        with pytest.raises(plane.errors.Unreachable):
            async with plane.Remote.connect(plane.http(url, token="x" * 32)):
                pass


@pytest.mark.slow
async def test_the_token_can_come_from_the_environment() -> None:
    env = {"SANDBOX_TEST_TOKEN": TOKEN}
    async with http_server("--token-env", "SANDBOX_TEST_TOKEN", env=env) as (url, _):
        assert (await initialize(url, {})).status_code == 401
        assert (await initialize(url, bearer(TOKEN))).status_code == 200


class Issuer:
    """An authorization server's signing key, its JWKS in a file, and tokens it signs."""

    def __init__(self, where: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid="k1", use="sig", alg="RS256")
        self.jwks = where / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [jwk]}))

    def token(self, audience: str, *, expires_in: float = 300, **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "aud": audience,
            "sub": "someone",
            "client_id": "agent",
            "iat": now,
            "exp": int(now + expires_in),
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": "k1"})


@pytest.mark.slow
async def test_oauth_lets_in_the_issuers_tokens_for_this_server(tmp_path: Path) -> None:
    issuer = Issuer(tmp_path)
    options = ["--oauth-issuer", ISSUER, "--oauth-jwks", issuer.jwks.as_uri()]
    async with http_server(*options, "--oauth-scope", "run") as (url, _):
        good = issuer.token(url, scope="read run")
        assert (await initialize(url, bearer(good))).status_code == 200

        refused = await initialize(url, {})
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert challenge.startswith("Bearer")
        assert "/.well-known/oauth-protected-resource/mcp" in challenge
        expired = issuer.token(url, expires_in=-120, scope="run")
        assert (await initialize(url, bearer(expired))).status_code == 401
        elsewhere = issuer.token("https://another.example/mcp", scope="run")
        assert (await initialize(url, bearer(elsewhere))).status_code == 401
        forged = Issuer(tmp_path / "..").token(url, scope="run")  # another key, same kid
        assert (await initialize(url, bearer(forged))).status_code == 401
        assert (await initialize(url, bearer(issuer.token(url)))).status_code == 403  # no scope

        base = url.removesuffix("/mcp")
        async with httpx2.AsyncClient(timeout=30) as client:
            metadata = await client.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        assert metadata.status_code == 200
        assert metadata.json()["authorization_servers"] == [ISSUER]
        assert metadata.json()["resource"] == url

        async with plane.Remote.connect(plane.http(url, token=good)) as remote:
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "o"}))
            assert r.data == "O"


def self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key: its PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sandbox test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.slow
async def test_tls_from_a_certificate_and_its_key(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    secret = tmp_path / "token"
    secret.write_text(TOKEN)
    tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--token-file", str(secret)]
    async with http_server(*tls) as (url, _):
        assert url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cert))
        assert (await initialize(url, bearer(TOKEN), verify=trusted)).status_code == 200
        assert (await initialize(url, {}, verify=trusted)).status_code == 401
        with pytest.raises(httpx2.ConnectError):
            await initialize(url, bearer(TOKEN))  # a certificate nobody vouches for
        async with plane.Remote.connect(plane.http(url, token=TOKEN, verify=str(cert))) as remote:
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "s"}))
            assert r.data == "S"
