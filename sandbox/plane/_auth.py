"""Who may use ``sandbox serve --http``: a bearer token, or OAuth access tokens.

Both are token verifiers of the MCP SDK (:class:`~mcp.server.auth.provider.TokenVerifier`),
behind the SDK's own bearer middleware, which answers a request without a valid token with
``401`` and ``WWW-Authenticate: Bearer``. The SDK leaves the checking of a token to the
verifier: :class:`BearerToken` compares it with one shared secret; :class:`JwtVerifier`
checks an OAuth access token that is a JWT (RFC 9068) against its issuer's published keys,
as a resource server does where an authorization server issues the tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final
from urllib.request import url2pathname

import anyio.to_thread
import jwt
import pydantic
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings

__all__ = ["MIN_TOKEN", "BearerToken", "JwtVerifier", "OAuth", "read_token"]

#: The shortest bearer token accepted: 16 characters (at least 96 bits if drawn from a
#: base64 alphabet), so that guessing it over the network is out of reach.
MIN_TOKEN: Final = 16
#: The signature algorithms a JWT may use: asymmetric only (a token signed with a shared
#: secret, or with "none", is refused whatever its issuer says).
JWT_ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "EdDSA",
)


def read_token(*, file: str | None = None, env: str | None = None) -> str:
    """The bearer token kept in ``file`` or in the environment variable ``env`` (one of
    them), surrounding white space removed.

    Raises:
        ValueError: neither or both, an empty or unset one, or one too short to be secret.
        OSError: the file cannot be read.
    """
    if (file is None) == (env is None):
        raise ValueError("a bearer token comes from a file or an environment variable")
    if file is not None:
        token, where = Path(file).read_text().strip(), file
    else:
        assert env is not None
        token, where = os.environ.get(env, "").strip(), f"${env}"
    if len(token) < MIN_TOKEN:
        raise ValueError(f"the bearer token in {where} is shorter than {MIN_TOKEN} characters")
    return token


@final
class BearerToken:
    """A :class:`TokenVerifier` that lets in whoever presents one shared secret.

    The comparison takes the same time however much of a token is right: both sides are
    hashed to the same length, then compared with :func:`hmac.compare_digest`.

    Raises:
        ValueError: the secret is shorter than :data:`MIN_TOKEN`.
    """

    def __init__(self, secret: str) -> None:
        if len(secret) < MIN_TOKEN:
            raise ValueError(f"a bearer token has at least {MIN_TOKEN} characters")
        self._digest = hashlib.sha256(secret.encode()).digest()

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        if not hmac.compare_digest(digest, self._digest):
            return None
        return AccessToken(token="bearer", client_id="bearer", scopes=[])


@final
class JwtVerifier:
    """A :class:`TokenVerifier` of OAuth access tokens that are JWTs (RFC 9068).

    A token is let in when it is signed by one of the issuer's keys (its JWKS, fetched from
    ``jwks`` and kept for five minutes), names ``issuer`` as ``iss`` and ``audience`` in
    ``aud``, and has not expired (``exp``, with ``leeway`` seconds for clocks that
    disagree). Its scopes are its ``scope`` claim (or ``scp``).

    Args:
        issuer: the authorization server, as its tokens name it.
        audience: this server, as tokens issued for it name it (its resource URL).
        jwks: where the issuer publishes its keys: an ``https://`` URL, or a ``file://``
            one for keys kept on this host (read once, now).
        algorithms: the signature algorithms accepted (asymmetric ones only).
        leeway: seconds of clock difference tolerated on ``exp``, ``nbf`` and ``iat``.

    Raises:
        ValueError: a bad option, or a ``file://`` JWKS that holds no usable key.
        OSError: the JWKS file cannot be read.
    """

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        jwks: str,
        algorithms: Sequence[str] = JWT_ALGORITHMS,
        leeway: float = 30.0,
    ) -> None:
        if not (leeway >= 0 and math.isfinite(leeway)):
            raise ValueError(f"leeway must be a number of seconds, got {leeway!r}")
        refused = [a for a in algorithms if a not in JWT_ALGORITHMS]
        if refused:
            raise ValueError(f"not asymmetric signature algorithms: {', '.join(refused)}")
        self.issuer = issuer
        self.audience = audience
        self._algorithms = list(algorithms)
        self._leeway = leeway
        self._client: jwt.PyJWKClient | None = None
        self._keyset: jwt.PyJWKSet | None = None
        if jwks.startswith("file://"):
            try:
                self._keyset = jwt.PyJWKSet.from_json(Path(url2pathname(jwks[7:])).read_text())
            except jwt.PyJWTError as exc:
                raise ValueError(f"no keys in {jwks}: {exc}") from None
        else:
            try:
                self._client = jwt.PyJWKClient(jwks, cache_keys=True, lifespan=300, timeout=10)
            except jwt.PyJWTError as exc:
                raise ValueError(f"the issuer's keys: {exc}") from None

    async def _key(self, token: str) -> jwt.PyJWK:
        if self._client is not None:
            # Fetched with urllib (blocking), at most every five minutes.
            return await anyio.to_thread.run_sync(self._client.get_signing_key_from_jwt, token)
        assert self._keyset is not None
        kid = jwt.get_unverified_header(token).get("kid")
        try:
            return self._keyset[str(kid)]
        except KeyError:
            raise jwt.InvalidKeyError(f"no key {kid!r}") from None

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await self._key(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=self._algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError:
            return None
        scope = claims.get("scope", claims.get("scp", ""))
        scopes = scope.split() if isinstance(scope, str) else [str(s) for s in scope]
        subject = claims.get("sub")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or subject or ""),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=str(subject) if subject is not None else None,
            claims={"iss": claims["iss"]},
        )


@final
@dataclass(frozen=True, kw_only=True)
class OAuth:
    """The HTTP server as an OAuth resource server: tokens issued by ``issuer`` let in.

    Attributes:
        issuer: the authorization server's URL (advertised in the protected resource
            metadata, RFC 9728, and expected as the tokens' ``iss``).
        jwks: where the issuer's keys are (see :class:`JwtVerifier`); or
        verifier: any verifier of the issuer's tokens (token introspection, say), instead.
        resource: this server's URL as the issuer names it in its tokens' audience; by
            default, the URL served.
        scopes: the scopes every token must carry (else ``403``).
    """

    issuer: str
    jwks: str | None = None
    verifier: TokenVerifier | None = None
    resource: str | None = None
    scopes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.jwks is None) == (self.verifier is None):
            raise ValueError("OAuth needs the issuer's keys (jwks) or a verifier, one of them")

    def settings(self, served: str) -> AuthSettings:
        """The SDK's settings of this resource server, ``served`` being the URL it serves.

        Raises:
            ValueError: the issuer or the resource is not an http(s) URL.
        """
        try:
            return AuthSettings.model_validate(
                {
                    "issuer_url": self.issuer,
                    "resource_server_url": self.resource or served,
                    "required_scopes": list(self.scopes) or None,
                    # The verifier checks the audience itself (JwtVerifier: ``aud``).
                    "validate_token_resource": False,
                }
            )
        except pydantic.ValidationError as exc:
            raise ValueError(f"OAuth: {exc.errors()[0]['msg']}") from None

    def token_verifier(self, served: str) -> TokenVerifier:
        """The verifier of this server's tokens, ``served`` being the URL it serves."""
        if self.verifier is not None:
            return self.verifier
        assert self.jwks is not None
        return JwtVerifier(issuer=self.issuer, audience=self.resource or served, jwks=self.jwks)
