"""``python librdkafka_producer.py PORT CLIENT_ID``: a confluent-kafka producer (whichever
``confluent_kafka`` is first on the path: the tests put an older one there) with Kafka's
``enable.metrics.push`` (librdkafka's default) against ``127.0.0.1:PORT``, polled so that it fetches
its subscription and pushes its metrics, until a line arrives on stdin. It prints ``version <v>`` first
(confluent-kafka's and librdkafka's versions) and ``closed`` once closed."""

from __future__ import annotations

import sys
import threading

import confluent_kafka


def main() -> None:
    port, client_id = sys.argv[1], sys.argv[2]
    print(f"version {confluent_kafka.version()[0]} {confluent_kafka.libversion()[0]}", flush=True)
    producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": client_id})
    done = threading.Event()

    def until_a_line() -> None:
        sys.stdin.readline()
        done.set()

    threading.Thread(target=until_a_line, daemon=True).start()
    while not done.is_set():
        producer.poll(0.1)
    producer.flush(5)
    del producer
    print("closed", flush=True)


if __name__ == "__main__":
    main()
