"""SCRAM credentials as Kafka's admin APIs manage them (KIP-554): DescribeUserScramCredentials and
AlterUserScramCredentials, what ``kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-256=[password=...]'`` and admin clients send.

A client sends a salted password (``Hi(password, salt, iterations)``), never the password; the sink
keeps only RFC 5802's StoredKey and ServerKey (``ingest.security.sasl.scram_credential``), writes them
to the config log as one change for the whole request, and every replica applies them as it follows the
log (``ConfigImage``): from then on the user authenticates with it on every replica's SASL listener,
over whatever the users file said for that user and mechanism (a deletion removes a file user's
credential too).

Authorization is Kafka's: describing needs DESCRIBE on the cluster, altering ALTER (here: super users;
else CLUSTER_AUTHORIZATION_FAILED, for the request or for every user). Per user, Kafka's codes and
messages:

| case | code |
|---|---|
| describing a user twice in one request | DUPLICATE_RESOURCE (92) |
| describing a user without a credential | RESOURCE_NOT_FOUND (91) |
| a mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2) | UNSUPPORTED_SASL_MECHANISM (33) |
| an empty user name; iterations outside 4,096..16,384; a salt under 12 bytes | UNACCEPTABLE_CREDENTIAL (93) |
| a user and mechanism altered twice in one request | DUPLICATE_RESOURCE (92) |
| deleting a credential that does not exist | RESOURCE_NOT_FOUND (91) |

(The salt bound is the sink's; Kafka takes any salt: ``MIN_SALT_BYTES``.) A user with any failed entry
has nothing of the request applied (Kafka answers per user); the users
without a failure are written together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from ingest.admin.config_log import ConfigLogError, ConfigLogFollower, ScramChange
from ingest.security.sasl import (
    MAX_SCRAM_ITERATIONS,
    MIN_SCRAM_ITERATIONS,
    SCRAM_MECHANISM_IDS,
    scram_credential,
)
from subscriptions import ClientContext, Errors
from subscriptions.admin import Operation

__all__ = ["ScramAdmin", "ScramDeletion", "ScramUpsertion", "UserResult"]

_MECHANISMS = {number: name for name, number in SCRAM_MECHANISM_IDS.items()}
MIN_SALT_BYTES: Final = 12
"""Shorter salts are refused (UNACCEPTABLE_CREDENTIAL), where Kafka takes any: the SCRAM exchange here
(scramp) will not use them, and admin clients send random salts of 20 bytes or more."""


class ScramDeletion(NamedTuple):
    user: str
    mechanism: int
    """Kafka's type byte: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512."""


class ScramUpsertion(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class UserResult(NamedTuple):
    """One user's answer: its error code and message (None when there is nothing to say), and for a
    description its credentials (Kafka's type byte -> iterations)."""

    user: str
    error: Errors
    message: str | None
    credentials: tuple[tuple[int, int], ...] = ()


def _upsertion_failure(upsertion: ScramUpsertion) -> tuple[Errors, str] | None:
    if upsertion.iterations < MIN_SCRAM_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > MAX_SCRAM_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if len(upsertion.salt) < MIN_SALT_BYTES:
        return Errors.UNACCEPTABLE_CREDENTIAL, f"The salt must be at least {MIN_SALT_BYTES} bytes"
    return None


class ScramAdmin:
    """The SCRAM admin operations over the config log and this replica's image of it."""

    def __init__(
        self,
        follower: ConfigLogFollower,
        authorize: Callable[[ClientContext, Operation], bool],
        now_ms: Callable[[], int],
    ) -> None:
        self.follower = follower
        self._authorize = authorize
        self._now_ms = now_ms

    def describe(self, client: ClientContext, users: Sequence[str] | None) -> tuple[Errors, list[UserResult]]:
        """DescribeUserScramCredentials: the request's error, and each user's (every user with a
        credential when ``users`` is None or empty, as Kafka's Admin sends it for "all")."""
        if not self._authorize(client, "DESCRIBE_CONFIGS"):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, []
        known = self.follower.image.credentials.scram_users()
        wanted = list(users) if users else sorted(known)  # null or empty: every user, as ScramImage.describe
        results = []
        for user in dict.fromkeys(wanted):
            if wanted.count(user) > 1:
                message = (
                    "Cannot describe SCRAM credentials for the same user twice in a single request: " + user
                )
                results.append(UserResult(user, Errors.DUPLICATE_RESOURCE, message))
            elif user not in known:
                message = f"Attempt to describe a user credential that does not exist: {user}"  # ScramImage
                results.append(UserResult(user, Errors.RESOURCE_NOT_FOUND, message))
            else:
                credentials = tuple(
                    (SCRAM_MECHANISM_IDS[m], iterations) for m, iterations in sorted(known[user].items())
                )
                results.append(UserResult(user, Errors.NONE, None, credentials))
        return Errors.NONE, results

    async def alter(
        self, client: ClientContext, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[UserResult]:
        """AlterUserScramCredentials: one result per user named in the request."""
        users = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
        if not self._authorize(client, "ALTER_CONFIGS"):
            return [UserResult(user, Errors.CLUSTER_AUTHORIZATION_FAILED, None) for user in users]
        failures = self._failures(deletions, upsertions)
        changes = [
            ScramChange(d.user, _MECHANISMS[d.mechanism], None) for d in deletions if d.user not in failures
        ] + [
            ScramChange(
                u.user,
                _MECHANISMS[u.mechanism],
                scram_credential(_MECHANISMS[u.mechanism], u.salt, u.salted_password, u.iterations),
            )
            for u in upsertions
            if u.user not in failures
        ]
        if changes:
            failure = await self._write(changes, client.principal)
            if failure is not None:
                failures.update({change.user: failure for change in changes})
        return [UserResult(user, *failures.get(user, (Errors.NONE, None))) for user in users]

    def _failures(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> dict[str, tuple[Errors, str]]:
        """The first failure of each user that has one, checked in Kafka's order
        (``ScramControlManager.alterCredentials``): the deletions, then the upsertions; a user keeps the
        first failure of its entries, and a second entry for a user whose first was accepted, whatever
        its mechanism, fails the user with DUPLICATE_RESOURCE."""
        failures: dict[str, tuple[Errors, str]] = {}
        accepted: set[str] = set()
        credentials = self.follower.image.credentials
        entries = [(d.user, d.mechanism, None) for d in deletions] + [
            (u.user, u.mechanism, u) for u in upsertions
        ]
        for user, mechanism, upsertion in entries:
            if user in failures:
                continue
            failure: tuple[Errors, str] | None = None
            if user in accepted:
                failure = (
                    Errors.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
            elif not user:
                failure = (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif mechanism not in _MECHANISMS:
                failure = (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif upsertion is None:
                if credentials.scram(_MECHANISMS[mechanism], user) is None:
                    failure = (
                        Errors.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    )
            else:
                failure = _upsertion_failure(upsertion)
            if failure is not None:
                failures[user] = failure
            else:
                accepted.add(user)
        return failures

    async def _write(self, changes: Sequence[ScramChange], principal: str) -> tuple[Errors, str] | None:
        """Log the changes (absolute values: written again after a conflict); the failure, if any."""
        try:
            await self.follower.write_absolute(changes, principal, self._now_ms())
        except ConfigLogError as exc:
            return exc.error, str(exc)
        return None
