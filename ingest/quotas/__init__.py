"""The quota and throttle engine: the quota family Kafka brokers enforce, as pure logic with an
injectable clock. Filled in module by module; see the package modules."""
