"""SCRAM credentials as Kafka stores them: salt, StoredKey, ServerKey and iterations per user and
mechanism (never the password), Kafka's AlterUserScramCredentials validation, and the JSON form
the metadata store persists.

The salted password a client sends in AlterUserScramCredentials (KIP-554: clients salt and hash
locally) is turned into StoredKey/ServerKey here, as Kafka's ScramControlManager does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

# Kafka's ScramMechanism type codes (clients.admin.ScramMechanism): 0 is UNKNOWN.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_CODES = {name: code for code, name in MECHANISM_TYPES.items()}
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# Kafka: ScramMechanism.minIterations() is 4096 for both, ScramControlManager.MAX_ITERATIONS 16384.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096

# Error codes used by the validation (protocol/errors.py is outside this package).
NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {"salt": enc(self.salt), "stored_key": enc(self.stored_key), "server_key": enc(self.server_key),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, d: dict) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(d["salt"]), dec(d["stored_key"]), dec(d["server_key"]), int(d["iterations"]))


# user -> mechanism name -> credential
Credentials = dict[str, dict[str, ScramCredential]]


def from_salted_password(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")
    (RFC 5802), as Kafka's ScramFormatter computes them."""
    h = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    server_key = hmac.new(salted_password, b"Server Key", h).digest()
    return ScramCredential(salt, h(client_key).digest(), server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2-HMAC with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism]().name, password.encode(), salt, iterations)


def from_password(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = os.urandom(32)
    return from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


@dataclass(slots=True)
class AlterResult:
    user: str
    error_code: int = NONE
    error_message: str | None = None


def validate_alter(deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int]],
                   existing: Credentials) -> tuple[list[AlterResult], list[tuple[str, int]], list[tuple[str, int, int]]]:
    """Kafka's ScramControlManager.alterCredentials checks. ``deletions`` are (user, mechanism code),
    ``upsertions`` (user, mechanism code, iterations), in request order (upsertions indexed by
    position so the caller keeps their salts). Returns the per-user results (successes first,
    deletions then upsertions, then errors, as Kafka orders them), the accepted deletions and
    the accepted upsertions as (user, code, index)."""
    errors: dict[str, tuple[int, str]] = {}
    dels: dict[str, tuple[str, int]] = {}
    ups: dict[str, tuple[str, int, int]] = {}
    dup = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for user, code in deletions:
        if user in errors:
            continue
        if dels.pop(user, None) is not None:
            errors[user] = dup
            continue
        err = _check_user_and_mechanism(user, code)
        if err is None and MECHANISM_TYPES[code] not in existing.get(user, {}):
            err = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if err is not None:
            errors[user] = err
        else:
            dels[user] = (user, code)
    for index, (user, code, iterations) in enumerate(upsertions):
        if user in errors:
            continue
        if dels.pop(user, None) is not None or ups.pop(user, None) is not None:
            errors[user] = dup
            continue
        err = _check_user_and_mechanism(user, code)
        if err is None and iterations < MIN_ITERATIONS:
            err = (UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif err is None and iterations > MAX_ITERATIONS:
            err = (UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if err is not None:
            errors[user] = err
        else:
            ups[user] = (user, code, index)
    results = [AlterResult(u) for u in dels] + [AlterResult(u) for u in ups]
    results += [AlterResult(u, c, m) for u, (c, m) in errors.items()]
    return results, list(dels.values()), list(ups.values())


def _check_user_and_mechanism(user: str, code: int) -> tuple[int, str] | None:
    if not user:
        return (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if code not in MECHANISM_TYPES:
        return (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


# --- persisted form -------------------------------------------------------------------------------

FILE_NAME = "kbroker-scram-credentials.json"


def encode(creds: Credentials) -> bytes:
    doc = {"version": 1, "users": {u: {m: c.to_json() for m, c in sorted(ms.items())}
                                   for u, ms in sorted(creds.items()) if ms}}
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def decode(data: bytes) -> Credentials:
    doc = json.loads(data)
    return {u: {m: ScramCredential.from_json(c) for m, c in ms.items()} for u, ms in doc.get("users", {}).items()}


def applied(creds: Credentials, deletions: list[tuple[str, str]],
            upserts: list[tuple[str, str, ScramCredential]]) -> Credentials:
    """A copy of ``creds`` with (user, mechanism) deletions and upserts applied."""
    out = {u: dict(ms) for u, ms in creds.items()}
    for user, mech in deletions:
        out.get(user, {}).pop(mech, None)
        if not out.get(user):
            out.pop(user, None)
    for user, mech, cred in upserts:
        out.setdefault(user, {})[mech] = cred
    return out
