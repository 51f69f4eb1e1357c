"""The whole path on an object store: a real S3-compatible server on loopback (tests.support.s3)."""
