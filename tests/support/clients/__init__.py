"""Client programs the tests run in processes of their own (an older client library on their path)."""
