"""The quota engine's errors form one tree, and each carries the Kafka code a client is answered with
(as a number: ``quotas`` imports nothing else, so ``subscriptions.errors.Errors`` names it here)."""

from __future__ import annotations

import pytest

import quotas
from quotas import QuotaConfigError, QuotaEntityError, QuotaError
from quotas.callback import QuotaCallbackError
from quotas.controller_mutation_quota_manager import ThrottlingQuotaExceededError
from subscriptions import Errors


def _subclasses(cls: type[QuotaError]) -> set[type[QuotaError]]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(c) for c in found))


EXPECTED: dict[type[QuotaError], Errors] = {
    QuotaEntityError: Errors.INVALID_REQUEST,
    ThrottlingQuotaExceededError: Errors.THROTTLING_QUOTA_EXCEEDED,
    QuotaConfigError: Errors.INVALID_CONFIG,
    QuotaCallbackError: Errors.INVALID_CONFIG,
}


def test_every_quota_error_is_in_the_tree_with_its_kafka_code() -> None:
    assert _subclasses(QuotaError) == set(EXPECTED)
    for error, code in EXPECTED.items():
        assert Errors(error.error_code) is code, error.__name__


@pytest.mark.parametrize("error", list(EXPECTED), ids=[error.__name__ for error in EXPECTED])
def test_the_tree_drawn_in_the_errors_module_names_every_quota_error(error: type[QuotaError]) -> None:
    assert error.__name__ in (quotas.errors.__doc__ or "")
