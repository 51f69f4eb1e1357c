"""Who is asking: authentication, the principal of a request on every transport, the client it speaks
for, and whose client instances it may write.

- ``authentication``: ``Authenticator``: bearer tokens, a trusted fronting proxy's word, and whether
  a principal is required.
- ``principals``: the principal of a TLS client certificate, written as Kafka writes it.
- ``identity``: the ``ClientContext`` of a request (principal, client id, software, address), the
  rules for client text, and the client an OTLP export speaks for.
- ``attribution``: whose telemetry a forwarded OTLP export carries, per ``ResourceMetrics``.
- ``instance_owners``: which principal an OTLP client instance id belongs to.

The facade exports nothing: the decoder processes import ``attribution`` alone (``ingest.push``'s
docstring says why). Import the modules by name.
"""

__all__: list[str] = []
