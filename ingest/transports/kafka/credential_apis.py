"""The Kafka admin APIs for SCRAM credentials (KIP-554), over the admin operations
(``ingest.admin.scram``): DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), v0,
what ``kafka-configs.sh --entity-type users`` and admin clients send.

A request whose header ``ClientId`` is not valid text is answered INVALID_REQUEST (for the request, or
for every user), as the other admin APIs answer it (``apis``).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ingest.admin.operations import SinkAdmin
from ingest.admin.scram import ScramDeletion, ScramUpsertion, UserResult
from ingest.security.identity import ClientTextError
from ingest.transports.kafka.protocol import (
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    RequestHeader,
    build,
    nested,
    response_schema,
)
from subscriptions import ClientContext, Errors

__all__ = ["CredentialApis"]

_ZERO_MS: Final = datetime.timedelta(0)


class CredentialApis:
    """The two handlers; ``client_of(header, connection)`` is who sent a request (``ClientTextError``
    for a header client id that is not valid text)."""

    def __init__(self, admin: SinkAdmin, client_of: Callable[[RequestHeader, Any], ClientContext]) -> None:
        self.admin = admin
        self._client_of = client_of

    async def describe_user_scram_credentials(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        schema = response_schema(DESCRIBE_USER_SCRAM_CREDENTIALS, header.api_version)
        try:
            client = self._client_of(header, connection)
        except ClientTextError as exc:
            return build(
                schema,
                throttle_time=_ZERO_MS,
                error_code=ErrorCode.invalid_request,
                error_message=str(exc),
                results=(),
            )
        users = None if body.users is None else [u.name for u in body.users]
        error, results = self.admin.scram.describe(client, users)
        result_schema = nested(schema, "DescribeUserScramCredentialsResult")
        info_schema = nested(schema, "CredentialInfo")
        return build(
            schema,
            throttle_time=_ZERO_MS,
            error_code=ErrorCode(error),
            error_message=None,
            results=tuple(
                build(
                    result_schema,
                    user=r.user,
                    error_code=ErrorCode(r.error),
                    error_message=r.message,
                    credential_infos=tuple(
                        build(info_schema, mechanism=mechanism, iterations=iterations)
                        for mechanism, iterations in r.credentials
                    ),
                )
                for r in results
            ),
        )

    async def alter_user_scram_credentials(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        schema = response_schema(ALTER_USER_SCRAM_CREDENTIALS, header.api_version)
        deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in body.deletions]
        upsertions = [
            ScramUpsertion(
                u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)
            )
            for u in body.upsertions
        ]
        try:
            client = self._client_of(header, connection)
        except ClientTextError as exc:
            users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
            results = [UserResult(user, Errors.INVALID_REQUEST, str(exc)) for user in users]
        else:
            results = await self.admin.scram.alter(client, deletions, upsertions)
        result_schema = nested(schema, "AlterUserScramCredentialsResult")
        return build(
            schema,
            throttle_time=_ZERO_MS,
            results=tuple(
                build(result_schema, user=r.user, error_code=ErrorCode(r.error), error_message=r.message)
                for r in results
            ),
        )
