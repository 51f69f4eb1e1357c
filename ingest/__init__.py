"""The sink: every server and stage a request meets, in rooms that import only the rooms below them
(an import contract in ``pyproject.toml`` checks it):

- ``server``: the composition root, ``Sink`` and ``serve`` (``telemetry-sink serve``), wiring the
  rest from ``config`` (the one YAML configuration, validated whole);
- ``transports``: gRPC, HTTP and the Kafka wire listener, and the connection quotas at accept time;
- side by side, neither importing the other: ``admin`` (the admin operations and the config log
  every replica follows) and ``push`` (the push pipeline and its stages: admission, holds, decoding,
  the point filter, metrics);
- ``security``: authentication, principals, client identity and attribution;
- at the bottom: ``errors`` (the one error table), ``limits`` (what one request may cost), the
  per-request plumbing every transport shares (``handler_time``: a request's handler time and its
  recording in the request quota; ``json_limits``: JSON bodies bounded before they are parsed),
  ``loop_lag``, ``wire`` (paths, headers and service names shared with the clients) and ``proto``
  (generated).

The quota engine is its own package (``quotas``), as are the subscription core (``subscriptions``)
and the landing (``exporters``). The facade exports nothing: import the rooms by name.
"""

__all__: list[str] = []
