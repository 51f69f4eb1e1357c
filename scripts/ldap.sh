#!/usr/bin/env bash
# The test setup for the SQL server's LDAP test: it runs Debian's OpenLDAP server (slapd, with the
# ldap-utils clients to load its one user) on loopback. When `slapd` is missing and we are root on
# Debian, the packages are installed from Debian's archive (their own service is not started);
# otherwise say so (the LDAP test then fails, it is never skipped).
set -euo pipefail
if command -v slapd >/dev/null 2>&1 && command -v ldapadd >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "test setup: installing Debian's slapd and ldap-utils for the SQL server's LDAP test" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils >/dev/null
else
    echo "test setup: warning: no slapd on PATH and no root apt-get to install it; the LDAP test will fail" >&2
fi
