"""Generated gRPC code for ``client_telemetry.proto`` (``make proto``); do not edit by hand."""
