"""The push path: every stage a push or an export goes through, and the pipeline that runs them in
order (``pipeline.TelemetryPipeline``, the one place where the stages meet).

- ``admission``: a bound on the requests in flight, answered at once with a retry delay beyond it.
- ``holds``: a throttled client's next request held until its throttle ends (muting without a
  connection to mute).
- ``codec``: decompressing and validating a payload; ``otlp_scan``: its structure counted on the wire
  before it is parsed; ``json_bodies``: OTLP JSON exports converted with bounded cost; ``otlp_points``: the
  OTLP points refused one by one (``partial_success``).
- ``decoding``: those stages as pure functions of a request's bytes, run in decoder processes for
  large payloads so the event loop is never held.
- ``metrics``: what every request records, and the ``/metrics`` page.

The facade exports nothing: the decoder processes import ``ingest.push.decoding`` alone, and a facade
importing the pipeline would load the exporters' storage libraries into each of them
(``tests/ingest/push/test_decoding.py`` checks what a decoder imports). Import the modules by name.
"""

__all__: list[str] = []
