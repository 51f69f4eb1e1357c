"""JVM artifacts from Maven Central that the project runs but does not build: pinned lists
(``<name>/pom.xml``), fetched by ``make setup`` into a cache the project owns (``.venv/maven``) and
checked against a lock of SHA-256 sums (``<name>/jars.sha256``), so that nothing downloads when the tests
or the product run. ``kafka``: Apache Kafka 4.4.0, the broker, its tools and its Java client, which the
tests use as the oracle of Kafka's behaviour (docs/kafka-oracle.md).

``python -m artifacts kafka`` fetches (a no-op when the cache already holds the locked jars);
``--lock`` writes the lock from what Maven fetched (after a deliberate change of the pom).
"""

from artifacts.maven import CACHE, Artifacts, FetchError, classpath, fetch

__all__ = ["CACHE", "Artifacts", "FetchError", "classpath", "fetch"]
