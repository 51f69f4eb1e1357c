"""The Helm chart (helm/telemetry-sink), rendered with Helm's own library (helm-python-sdk) for the
default values and the variants operators use: it lints clean, every manifest is valid against the
Kubernetes schemas (kubernetes-validate, strict), the sink's configuration it renders loads in the
sink's own config parser, and values.schema.json refuses bad values."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from ingest.config import KafkaListenerConfig, ServerConfig, SinkConfig
from ingest.limits import RequestLimits
from ingest.server import shutdown_budget_s
from ingest.transports.request_memory import DEFAULT_REQUEST_MEMORY
from telemetry_sink.cli import build_parser
from telemetry_sink.commands.spark import _sql_server_settings as sql_server_settings
from tests.support.paths import REPO

pytestmark = pytest.mark.helm
CHART = REPO / "helm" / "telemetry-sink"
KUBERNETES = ("1.25", "1.37")
"""The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas."""


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


RWX = {"storage": {"pvc": {"accessModes": ["ReadWriteMany"]}}}
SQL = {"sqlServer": {"enabled": True, "auth": {"existingSecret": "sql-passwords"}}}
LDAP_EGRESS = {"to": [{"ipBlock": {"cidr": "10.0.5.10/32"}}], "ports": [{"port": 636, "protocol": "TCP"}]}
STORE_EGRESS = {"to": [{"ipBlock": {"cidr": "52.218.0.0/17"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
SQL_LDAP = {
    "sqlServer": {
        "enabled": True,
        "auth": {"ldap": {"url": "ldaps://ldap.example.org:636", "baseDN": "ou=people,dc=example,dc=org"}},
        "networkPolicy": {"egress": {"rules": [LDAP_EGRESS]}},
    },
    "networkPolicy": {"enabled": True},
}
OBJECT_STORE = {
    "storage": {
        "type": "objectStore",
        "objectStore": {
            "uri": "s3://telemetry/sink",
            "storageOptions": {"AWS_REGION": "eu-west-1"},
            "existingSecret": "sink-s3",
        },
    },
}
SQL_EVERYTHING = {
    "sqlServer": {
        "enabled": True,
        "auth": {"existingSecret": "sql-passwords", "passwordFileKey": "users"},
        "tls": {"existingSecret": "sql-tls"},
        "connect": {"enabled": True, "tokenSecret": "sql-connect", "tokenKey": "connect-token"},
        "transport": "http",
        "sparkConf": {"spark.driver.memory": "3g"},
        "networkPolicy": {
            "allowedFrom": [{"podSelector": {"matchLabels": {"app": "superset"}}}],
            "egress": {"rules": [STORE_EGRESS]},
        },
        "objectStore": {"existingSecret": "sink-s3-read-only"},
    },
    "networkPolicy": {"enabled": True},
    **OBJECT_STORE,
}
SQL_SHARING = _merge(
    OBJECT_STORE, _merge(SQL, {"sqlServer": {"objectStore": {"shareWriterCredentials": True}}})
)
SQL_IDENTITY = _merge(
    OBJECT_STORE,
    _merge(
        SQL,
        {
            "sqlServer": {
                "serviceAccountName": "sql-reader",
                "networkPolicy": {"egress": {"restricted": False}},
            },
            "networkPolicy": {"enabled": True},
        },
    ),
)
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "tls": {
        "tls": {"enabled": True, "existingSecret": "sink-tls", "clientAuth": True},
        "tests": {"clientCertSecret": "sink-test-client"},
    },
    "object store": {
        "storage": {
            "type": "objectStore",
            "objectStore": {
                "uri": "s3://telemetry/sink",
                "storageOptions": {"AWS_REGION": "eu-west-1"},
                "existingSecret": "sink-s3",
            },
        },
        "replicaCount": 3,
    },
    "kafka listener": {"kafkaListener": {"enabled": True, "port": 9094}, "networkPolicy": {"enabled": True}},
    "cold rollups": {"rollup": {"runAs": "cronjob"}},
    "spark-submit": {
        **RWX,
        "replicaCount": 2,
        "rollup": {"mode": "kubernetes", "sparkConf": {"spark.ui.enabled": "false"}},
    },
    "everything": {
        **RWX,
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
        "networkPolicy": {
            "enabled": True,
            "ingressFrom": [{"namespaceSelector": {"matchLabels": {"kafka": "clients"}}}],
        },
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "tls": {"enabled": True, "existingSecret": "sink-tls"},
        "imagePullSecrets": [{"name": "registry"}],
        "service": {"type": "LoadBalancer"},
        "auth": {"existingSecret": "sink-tokens"},
        "sink": {
            "superUsers": ["User:admin"],
            "quotas": {"quota.window.num": 11},
            "clientQuotas": [{"entity": {"user": None}, "quotas": {"producer_byte_rate": 1048576}}],
        },
        "podAntiAffinity": "hard",
        "kafkaListener": {
            "enabled": True,
            "advertisedHost": "telemetry.example.com",
            "clusterId": "telemetry",
            "maxConnections": 10000,
        },
    },
    "sql server": SQL,
    "sql server with everything": SQL_EVERYTHING,
    "sql server with ldap": SQL_LDAP,
    "sql server sharing the writers' credentials": SQL_SHARING,
    "sql server with a workload identity": SQL_IDENTITY,
    "sql server on a shared volume": _merge(
        SQL, {**RWX, "replicaCount": 2, "networkPolicy": {"enabled": True}}
    ),
}


def render(values: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Template path -> its manifests (NOTES.txt and empty templates left out)."""
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(dict(values), name="ts", namespace="telemetry")
    return {
        path: [doc for doc in yaml.safe_load_all(text) if doc]
        for path, text in rendered.items()
        if not path.endswith("NOTES.txt") and text.strip()
    }


def manifests(values: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for docs in render(values).values():
        yield from docs


def one(values: Mapping[str, Any], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [
        m for m in manifests(values) if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]
    return found


def sink_config(values: Mapping[str, Any]) -> str:
    return str(one(values, "ConfigMap", "ts-telemetry-sink")["data"]["telemetry-sink.yaml"])


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_lints_clean_in_strict_mode(variant: str) -> None:
    report = helm.lint(str(CHART), VARIANTS[variant], strict=True, namespace="telemetry")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_every_rendered_manifest_is_valid_for_kubernetes(variant: str, kubernetes: str) -> None:
    kinds = []
    for manifest in manifests(VARIANTS[variant]):
        kinds.append(manifest["kind"])
        if manifest["apiVersion"] == "monitoring.coreos.com/v1":  # a CRD: no Kubernetes schema
            assert set(manifest["spec"]) == {"selector", "endpoints"}
            continue
        kubernetes_validate.validate(manifest, kubernetes, strict=True)
    assert {"Deployment", "Service", "ConfigMap"} <= set(kinds)


def load_sink_config(values: Mapping[str, Any], tmp_path: Path) -> SinkConfig:
    """The rendered configuration, loaded by the sink as a pod would (the Secrets' mount points as files
    under tmp_path)."""
    for mounted in ("tls/tls.crt", "tls/tls.key", "tls/ca.crt", "auth/tokens.yaml"):
        (tmp_path / mounted).parent.mkdir(exist_ok=True)
        (tmp_path / mounted).write_text("s3cret: User:alice\n" if mounted.startswith("auth") else "")
    file = tmp_path / "telemetry-sink.yaml"
    file.write_text(sink_config(values).replace("/etc/telemetry-sink/", f"{tmp_path}/"))
    return SinkConfig.load(file, env={"TELEMETRY_SINK_REPLICA_ID": "ts-telemetry-sink-abc"})


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_rendered_configuration_loads_in_the_sink(variant: str, tmp_path: Path) -> None:
    config = load_sink_config(VARIANTS[variant], tmp_path)
    assert config.replica_id == "ts-telemetry-sink-abc"
    assert (config.server.grpc_port, config.server.http_port) == (4317, 4318)
    listener = _merge(DEFAULTS["kafkaListener"], VARIANTS[variant].get("kafkaListener", {}))
    assert config.kafka_listener.port == (listener["port"] if listener["enabled"] else None)


SINK_KAFKA_DEFAULTS = KafkaListenerConfig()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # disabled (the chart's default): the sink, whose own default is 9094, must not listen
        ({}, {"port": None}),
        ({"kafkaListener": {"port": 19092}}, {"port": None}),
        # enabled: the chart's port, the sink's defaults for everything left unset
        ({"kafkaListener": {"enabled": True}}, {"port": 9094}),
        ({"kafkaListener": {"enabled": True, "port": 19092}}, {"port": 19092}),
        # clients outside the cluster: an address of the load balancer
        (
            {
                "kafkaListener": {
                    "enabled": True,
                    "advertisedHost": "telemetry.example.com",
                    "advertisedPort": 443,
                    "nodeId": 7,
                    "clusterId": "telemetry-eu-west-1",
                },
                "service": {"type": "LoadBalancer"},
            },
            {
                "port": 9094,
                "advertised_host": "telemetry.example.com",
                "advertised_port": 443,
                "node_id": 7,
                "cluster_id": "telemetry-eu-west-1",
            },
        ),
        # with TLS: a name the certificate holds; an IPv6 literal and an empty host (the sink's default)
        (
            {
                "kafkaListener": {"enabled": True, "advertisedHost": "ts-telemetry-sink.telemetry.svc"},
                "tls": {"enabled": True, "existingSecret": "sink-tls"},
            },
            {"port": 9094, "advertised_host": "ts-telemetry-sink.telemetry.svc"},
        ),
        ({"kafkaListener": {"enabled": True, "advertisedHost": "fd00::1"}}, {"advertised_host": "fd00::1"}),
        ({"kafkaListener": {"enabled": True, "advertisedHost": ""}}, {"advertised_host": None}),
        # the limits, large numbers as integers
        (
            {
                "kafkaListener": {
                    "enabled": True,
                    "socketRequestMaxBytes": 2147483647,
                    "connectionsMaxIdleMs": 60000,
                    "requestReadTimeoutMs": 5000,
                    "maxConnections": 100000,
                    "maxConnectionCreationRate": 50,
                }
            },
            {
                "socket_request_max_bytes": 2147483647,
                "connections_max_idle_ms": 60000,
                "request_read_timeout_ms": 5000,
                "max_connections": 100000,
                "max_connection_creation_rate": 50,
            },
        ),
    ],
)
def test_the_kafka_listener_section_loads_in_the_sink_with_the_charts_values(
    values: dict[str, Any], expected: dict[str, Any], tmp_path: Path
) -> None:
    kafka = load_sink_config(values, tmp_path).kafka_listener
    assert {name: getattr(kafka, name) for name in expected} == expected
    # everything else is the sink's default: the chart renders only what was set
    for name in (f.name for f in dataclasses.fields(kafka)):
        if name not in expected and name != "port":
            assert getattr(kafka, name) == getattr(SINK_KAFKA_DEFAULTS, name), name
    document = yaml.safe_load(sink_config(values))["kafka_listener"]
    assert set(document) <= {"port", "node_id", *expected}


def test_request_limits_and_decoder_processes_reach_the_sink_and_the_rest_keep_the_sinks_defaults(
    tmp_path: Path,
) -> None:
    config = load_sink_config({"sink": {"limits": {"max_data_points": 5000}, "decodeProcesses": 4}}, tmp_path)
    assert config.limits == dataclasses.replace(RequestLimits(), max_data_points=5000)
    assert config.server.decode_processes == 4
    defaults = load_sink_config({}, tmp_path)
    assert defaults.limits == RequestLimits()
    assert defaults.server.decode_processes == ServerConfig().decode_processes


def test_raw_forwarders_tolerant_otlp_intake_reaches_the_sink_and_is_off_by_default(tmp_path: Path) -> None:
    assert load_sink_config({"sink": {"otlpTolerantIntake": True}}, tmp_path).server.otlp_tolerant_intake
    assert load_sink_config({}, tmp_path).server.otlp_tolerant_intake is False


def test_the_kafka_listener_port_is_the_one_the_pods_and_the_service_open(tmp_path: Path) -> None:
    values = _merge(VARIANTS["kafka listener"], {"kafkaListener": {"port": 19092}})
    assert load_sink_config(values, tmp_path).kafka_listener.port == 19092
    [sink] = one(values, "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]["containers"]
    assert {"name": "kafka", "containerPort": 19092, "protocol": "TCP"} in sink["ports"]
    service = one(values, "Service")["spec"]["ports"]
    assert {"name": "kafka", "port": 19092, "targetPort": "kafka", "protocol": "TCP"} in service
    disabled = one({}, "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]["containers"][0][
        "ports"
    ]
    assert "kafka" not in [p["name"] for p in disabled]


def test_the_front_end_runs_as_an_sre_expects() -> None:
    deployment = one({}, "Deployment", "ts-telemetry-sink")
    pod = deployment["spec"]["template"]["spec"]
    [sink] = pod["containers"]
    assert sink["args"] == ["serve", "--config", "/etc/telemetry-sink/config/telemetry-sink.yaml"]
    assert sink["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert sink["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert sink["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] == 5 + 30 + 20 + 5  # preStop, grace, flush bound, margin
    assert sink["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert sink["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert {m["mountPath"] for m in sink["volumeMounts"]} == {
        "/etc/telemetry-sink/config",
        "/tmp",
        "/var/lib/telemetry-sink/data",
    }
    assert sink["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # a ReadWriteOnce volume
    assert "podAntiAffinity" in pod["affinity"]


def test_F17_the_pods_grace_period_covers_the_shutdown_budget_the_sink_uses(tmp_path: Path) -> None:
    timing = {
        "preStopSleepSeconds": 3,
        "shutdownGraceSeconds": 12.5,
        "shutdownFlushSeconds": 7.25,
        "terminationGraceMarginSeconds": 4,
    }
    values = {"sink": timing}
    server = load_sink_config(values, tmp_path).server
    assert (server.shutdown_grace_s, server.shutdown_flush_s) == (12.5, 7.25)
    pod = one(values, "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]
    # SIGKILL comes this long after the preStop pause began: never within the sink's own budget
    assert pod["terminationGracePeriodSeconds"] == math.ceil(3 + shutdown_budget_s(server) + 4) == 27
    assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "3"]


def test_a_configuration_change_rolls_the_pods() -> None:
    def checksum(values: Mapping[str, Any]) -> str:
        return str(
            one(values, "Deployment", "ts-telemetry-sink")["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
        )

    assert checksum({}) != checksum({"sink": {"maxConcurrentRequests": 100}})
    enabled = {"kafkaListener": {"enabled": True}}
    assert checksum({}) != checksum(enabled)
    assert checksum(enabled) != checksum(_merge(enabled, {"kafkaListener": {"advertisedHost": "k.example"}}))
    assert checksum({}) == checksum({"resources": {"requests": {"cpu": "1"}}})


def test_service_keeps_a_clients_requests_on_one_replica_and_opens_the_kafka_port_when_enabled() -> None:
    service = one({}, "Service")["spec"]
    assert service["sessionAffinity"] == "ClientIP"
    assert [(p["name"], p["port"]) for p in service["ports"]] == [("grpc", 4317), ("http", 4318)]
    kafka = one(VARIANTS["kafka listener"], "Service")["spec"]
    assert ("kafka", 9094) in [(p["name"], p["port"]) for p in kafka["ports"]]
    policy = one(VARIANTS["kafka listener"], "NetworkPolicy")["spec"]
    assert [p["port"] for p in policy["ingress"][0]["ports"]] == ["grpc", "http", "kafka"]


def test_F7_F8_trusted_proxies_and_required_authentication_reach_the_sink_config() -> None:
    sink = {
        "trustedProxies": ["127.0.0.1/32"],
        "trustedProxyPrincipals": ["User:CN=edge-proxy,O=Acme"],
        "requireAuthentication": True,
        "trustedForwarders": ["User:kafka-broker"],
    }
    values = _merge(VARIANTS["tls"], {"sink": sink, "kafkaListener": {"enabled": True}})
    security = yaml.safe_load(sink_config(values))["security"]
    assert security["trusted_forwarders"] == ["User:kafka-broker"]
    assert (
        security["trusted_proxies"],
        security["trusted_proxy_principals"],
        security["require_authentication"],
    ) == (["127.0.0.1/32"], ["User:CN=edge-proxy,O=Acme"], True)
    assert yaml.safe_load(sink_config({}))["security"]["require_authentication"] is False


def test_the_landing_exporters_options_reach_the_sink(tmp_path: Path) -> None:
    landing = {"commit_timeout_ms": 5000, "writer_lease_ms": 60000}
    assert load_sink_config({"sink": {"landing": landing}}, tmp_path).exporter.options == landing
    assert yaml.safe_load(sink_config({}))["exporter"]["options"] == {}


def test_tls_and_tokens_come_from_existing_secrets(tmp_path: Path) -> None:
    values = _merge(VARIANTS["tls"], {"auth": {"existingSecret": "sink-tokens"}})
    pod = one(values, "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"tls": "sink-tls", "auth": "sink-tokens"}
    assert pod["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": "http"}  # mTLS
    document = yaml.safe_load(sink_config(values))
    assert document["server"]["tls_client_ca_file"] == "/etc/telemetry-sink/tls/ca.crt"
    assert document["security"]["tokens_file"] == "/etc/telemetry-sink/auth/tokens.yaml"
    test = one(values, "Pod")["spec"]  # helm test pushes over mTLS with a token
    args = test["containers"][0]["args"]
    assert args[args.index("--tls-ca-file") + 1] == "/etc/telemetry-sink/tls/ca.crt"
    assert args[args.index("--tls-cert-file") + 1] == "/etc/telemetry-sink/client/tls.crt"
    assert args[args.index("--token-file") + 1] == "/etc/telemetry-sink/token/token"
    volumes = {v["name"]: v["secret"] for v in test["volumes"] if "secret" in v}
    assert volumes["client"]["secretName"] == "sink-test-client"
    assert volumes["token"] == {
        "secretName": "sink-tokens",
        "items": [{"key": "test-token", "path": "token"}],
    }


def test_a_sasl_kafka_listener_gets_its_users_from_an_existing_secret(tmp_path: Path) -> None:
    kafka = {
        "enabled": True,
        "securityProtocol": "SASL_SSL",
        "saslEnabledMechanisms": ["SCRAM-SHA-512"],
        "connectionsMaxReauthMs": 3600000,
        "saslUsersSecret": "sink-sasl-users",
    }
    values = _merge(VARIANTS["tls"], {"kafkaListener": kafka})
    pod = one(values, "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets["sasl-users"] == "sink-sasl-users"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["sasl-users"] == "/etc/telemetry-sink/sasl"
    document = yaml.safe_load(sink_config(values))
    assert document["security"]["sasl_users_file"] == "/etc/telemetry-sink/sasl/users.yaml"
    users = tmp_path / "users.yaml"
    users.write_text("alice: secret\n")
    document["security"]["sasl_users_file"] = str(users)
    for key in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        (tmp_path / key).write_text("PEM")  # the config checks the files exist; the listener is not started
        document["server"][key] = str(tmp_path / key)
    listener = SinkConfig.from_document(document).kafka_listener
    assert listener.security_protocol == "SASL_SSL"
    assert listener.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert listener.connections_max_reauth_ms == 3600000


def test_a_sasl_kafka_listener_without_a_users_secret_is_refused_at_render() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render({"kafkaListener": {"enabled": True, "securityProtocol": "SASL_PLAINTEXT"}})
    assert "needs kafkaListener.saslUsersSecret" in str(refused.value)


def test_object_store_credentials_reach_every_pod_from_a_secret() -> None:
    values = VARIANTS["object store"]
    assert not [m for m in manifests(values) if m["kind"] == "PersistentVolumeClaim"]
    assert yaml.safe_load(sink_config(values))["data_root"] == "s3://telemetry/sink"
    for kind, name in (
        ("Deployment", "ts-telemetry-sink"),
        ("Deployment", "ts-telemetry-sink-rollup"),
        ("CronJob", "ts-telemetry-sink-maintain"),
    ):
        manifest = one(values, kind, name)
        spec = (
            manifest["spec"]["template"]["spec"]
            if kind == "Deployment"
            else manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        )
        [container] = spec["containers"]
        assert container["envFrom"] == [{"secretRef": {"name": "sink-s3"}}], name
        if name != "ts-telemetry-sink":
            args = container["args"]
            assert args[args.index("--data-root") + 1] == "s3://telemetry/sink"
            assert args[args.index("--storage-option") + 1] == "AWS_REGION=eu-west-1"


def rollup_pod(values: Mapping[str, Any]) -> dict[str, Any]:
    """The rollup's pod spec, from its Deployment or its CronJob."""
    [rollup] = [m for m in manifests(values) if m["metadata"]["name"] == "ts-telemetry-sink-rollup"]
    template = (
        rollup["spec"]["template"]
        if rollup["kind"] == "Deployment"
        else rollup["spec"]["jobTemplate"]["spec"]["template"]
    )
    spec: dict[str, Any] = template["spec"]
    return spec


def test_rollups_run_long_in_a_deployment_by_default_or_cold_on_a_schedule() -> None:
    deployment = one({}, "Deployment", "ts-telemetry-sink-rollup")["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"] == {"type": "Recreate"}  # never two rollups at once
    labels = deployment["template"]["metadata"]["labels"]
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    assert labels["app.kubernetes.io/component"] == "rollup"  # not the front end's Service's pods
    pod = deployment["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    args = pod["containers"][0]["args"]
    assert args[:3] == ["rollup", "--every", "60"]
    assert pod["affinity"]["podAffinity"]  # beside the front end: they share a ReadWriteOnce volume
    assert not [
        m for m in manifests({}) if m["kind"] == "CronJob" and m["metadata"]["name"].endswith("rollup")
    ]
    cold = {"rollup": {"runAs": "cronjob", "schedule": "*/10 * * * *"}}
    cron = one(cold, "CronJob", "ts-telemetry-sink-rollup")["spec"]
    assert (cron["schedule"], cron["concurrencyPolicy"]) == ("*/10 * * * *", "Forbid")
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    args = pod["containers"][0]["args"]
    assert args[:2] == ["rollup", "--once"]
    assert args[args.index("--master") + 1] == "local[2]"
    assert pod == {**rollup_pod({}), "restartPolicy": "Never", "containers": pod["containers"]}
    assert not [
        m
        for m in manifests(cold)
        if m["metadata"]["name"] == "ts-telemetry-sink-rollup" and m["kind"] == "Deployment"
    ]


def test_rollups_run_on_the_cluster_in_spark_submit_mode() -> None:
    values = VARIANTS["spark-submit"]
    remote = rollup_pod(values)
    args = remote["containers"][0]["args"]
    assert args[args.index("--master") + 1] == "k8s://https://kubernetes.default.svc:443"
    confs = {
        args[i + 1].split("=", 1)[0]: args[i + 1].split("=", 1)[1]
        for i, a in enumerate(args)
        if a == "--conf"
    }
    assert confs["spark.driver.host"] == "$(POD_IP)"
    assert (
        confs["spark.kubernetes.executor.volumes.persistentVolumeClaim.data.options.claimName"]
        == "ts-telemetry-sink-data"
    )
    assert confs["spark.ui.enabled"] == "false"
    assert confs["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"  # executors are owned by the driver pod
    assert (
        confs["spark.kubernetes.authenticate.executor.serviceAccountName"] == "ts-telemetry-sink"
    )  # no rights
    assert confs["spark.kubernetes.executor.podTemplateFile"] == "/etc/telemetry-sink/spark/executor.yaml"
    template = yaml.safe_load(one(values, "ConfigMap", "ts-telemetry-sink-spark")["data"]["executor.yaml"])
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    assert template["spec"]["enableServiceLinks"] is False
    assert template["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    kubernetes_validate.validate(template, KUBERNETES[0], strict=True)
    assert remote["serviceAccountName"] == "ts-telemetry-sink-spark"
    role = one(values, "Role")
    assert {"pods", "services", "configmaps"} <= set(role["rules"][0]["resources"])
    binding = one(values, "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ts-telemetry-sink-spark", "namespace": "telemetry"}
    ]


def test_maintenance_runs_telemetry_sink_maintain_on_its_schedule() -> None:
    cron = one({}, "CronJob", "ts-telemetry-sink-maintain")["spec"]
    assert cron["schedule"] == "17 3 * * *"
    args = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["maintain", "--data-root", "/var/lib/telemetry-sink/data", "--retention-hours", "168"]


def test_autoscaling_owns_the_replica_count() -> None:
    values = VARIANTS["everything"]
    assert "replicas" not in one(values, "Deployment", "ts-telemetry-sink")["spec"]
    assert one(values, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] == 6
    assert one(values, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_helm_test_pushes_one_sample_through_the_service() -> None:
    pod = one({}, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    args = pod["spec"]["containers"][0]["args"]
    assert args[0] == "loadgen"
    assert args[args.index("--grpc") + 1] == "ts-telemetry-sink:4317"


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"replicaCont": 2}, "additional properties 'replicaCont' not allowed"),
        ({"replicaCount": "two"}, "at '/replicaCount': got string, want integer"),
        ({"sink": {"limits": {"max_data_points": 0}}}, "at '/sink/limits/max_data_points': minimum"),
        ({"service": {"grpcPort": 70000}}, "at '/service/grpcPort': maximum"),
        ({"storage": {"type": "s3"}}, "at '/storage/type'"),
        ({"rollup": {"schedule": "every five minutes"}}, "at '/rollup/schedule'"),
        ({"rollup": {"sparkConf": {"driver.memory": "4g"}}}, "'driver.memory' does not match pattern"),
        ({"service": {"sessionAffinity": "Sticky"}}, "at '/service/sessionAffinity'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
        ({"sink": {"superUsers": ["admin"]}}, "at '/sink/superUsers/0'"),
        ({"sink": {"trustedProxies": ["10.0.0.0/8"]}}, "at '/sink/trustedProxies/0'"),  # F7: every pod
        ({"sink": {"trustedProxyPrincipals": ["edge-proxy"]}}, "at '/sink/trustedProxyPrincipals/0'"),
        ({"sink": {"requireAuthentication": "yes"}}, "at '/sink/requireAuthentication'"),
        ({"sink": {"otlpTolerantIntake": "yes"}}, "at '/sink/otlpTolerantIntake'"),
        ({"rollup": {"sparkConf": {"spark.executor.memory": 4}}}, "got number, want string"),
        ({"storage": {"pvc": {"accessModes": ["ReadWriteOncePod"]}}}, "at '/storage/pvc/accessModes/0'"),
        ({"maintain": {"retentionHours": 1.5}}, "at '/maintain/retentionHours'"),
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "at '/podDisruptionBudget/maxUnavailable'"),
        ({"kafkaListener": {"advertisedHost": "kafka:9094/x"}}, "at '/kafkaListener/advertisedHost'"),
        ({"kafkaListener": {"advertisedPort": 0}}, "at '/kafkaListener/advertisedPort'"),
        ({"kafkaListener": {"nodeId": -1}}, "at '/kafkaListener/nodeId'"),
        ({"kafkaListener": {"clusterId": ""}}, "at '/kafkaListener/clusterId'"),
        ({"kafkaListener": {"maxConnections": 0}}, "at '/kafkaListener/maxConnections'"),
        ({"kafkaListener": {"socketRequestMaxBytes": 2**31}}, "at '/kafkaListener/socketRequestMaxBytes'"),
        ({"kafkaListener": {"advertisdHost": "k"}}, "additional properties 'advertisdHost' not allowed"),
        ({"sqlServer": {"transport": "grpc"}}, "at '/sqlServer/transport'"),
        ({"sqlServer": {"port": 70000}}, "at '/sqlServer/port': maximum"),
        ({"sqlServer": {"connect": {"port": 0}}}, "at '/sqlServer/connect/port': minimum"),
        ({"sqlServer": {"maxResultRows": 0}}, "at '/sqlServer/maxResultRows': minimum"),
        ({"sqlServer": {"refreshSeconds": 0}}, "at '/sqlServer/refreshSeconds'"),
        ({"sqlServer": {"sparkConf": {"driver.memory": "4g"}}}, "'driver.memory' does not match pattern"),
        ({"sqlServer": {"auth": {"passwordFileKey": ""}}}, "at '/sqlServer/auth/passwordFileKey'"),
        ({"sqlServer": {"replicas": 2}}, "additional properties 'replicas' not allowed"),
        ({"sqlServer": {"auth": {"ldap": {"url": "http://x"}}}}, "at '/sqlServer/auth/ldap/url'"),
    ],
)
def test_values_schema_refuses_bad_values(values: dict[str, Any], error: str) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(values)
    assert error in str(refused.value)


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"replicaCount": 2}, "a ReadWriteOnce volume cannot be shared by several front-end replicas"),
        ({"autoscaling": {"enabled": True}}, "a ReadWriteOnce volume cannot be shared"),
        ({"rollup": {"mode": "kubernetes"}}, "rollup.mode kubernetes runs executors on other nodes"),
        ({"storage": {"type": "objectStore"}}, "set storage.objectStore.uri"),
        ({"tls": {"enabled": True}}, "set tls.existingSecret"),
        ({"tls": {"clientAuth": True}}, "tls.clientAuth needs tls.enabled"),
        ({"tls": {"enabled": True, "existingSecret": "t", "clientAuth": True}}, "set tests.clientCertSecret"),
        ({"auth": {"existingSecret": "tokens"}}, "bearer tokens need tls.enabled"),  # F8: in clear
        (
            {"sink": {"trustedProxyPrincipals": ["User:CN=edge"]}},
            "sink.trustedProxyPrincipals needs tls.clientAuth",
        ),
        (
            {"sink": {"requireAuthentication": True}, "kafkaListener": {"enabled": True}},
            "the Kafka port has no SASL",
        ),
        (
            {**RWX, "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
            "minReplicas is above",
        ),
        ({"fullnameOverride": "a" * 44}, "longer than 43 characters"),
        (
            {
                **RWX,
                "serviceMonitor": {"enabled": True},
                "tls": {"enabled": True, "existingSecret": "t", "clientAuth": True},
                "tests": {"clientCertSecret": "c"},
            },
            "set serviceMonitor.clientCertSecret",
        ),
        ({"kafkaListener": {"enabled": True, "port": 4318}}, "kafkaListener.port must differ"),
        (
            {"kafkaListener": {"enabled": True, "port": 9092}, "service": {"grpcPort": 9092}},
            "kafkaListener.port must differ",
        ),
        # the SQL server listens beyond loopback: the command refuses to start without these
        (
            {"sqlServer": {"enabled": True}},
            "sqlServer.enabled: set sqlServer.auth.existingSecret to a Secret holding the password file "
            "(telemetry-sink sql-server --hash-password USER), or sqlServer.auth.ldap.url and "
            "sqlServer.auth.ldap.baseDN",
        ),
        # a password file or LDAP, not both (the command exits 2); the LDAP URL and base DN go together
        (
            _merge(SQL, {"sqlServer": {"auth": {"ldap": {"url": "ldap://ldap", "baseDN": "dc=example"}}}}),
            "set sqlServer.auth.existingSecret (a password file) or sqlServer.auth.ldap.url (an LDAP bind), "
            "not both",
        ),
        (
            {"sqlServer": {"enabled": True, "auth": {"ldap": {"url": "ldap://ldap"}}}},
            "sqlServer.auth.ldap.url needs sqlServer.auth.ldap.baseDN",
        ),
        (
            _merge(SQL, {"sqlServer": {"auth": {"ldap": {"baseDN": "dc=example"}}}}),
            "sqlServer.auth.ldap.baseDN needs sqlServer.auth.ldap.url",
        ),
        (_merge(SQL, {"sqlServer": {"connect": {"enabled": True}}}), "set sqlServer.connect.tokenSecret"),
        (_merge(SQL, {"sqlServer": {"healthPort": 10000}}), "sqlServer.port, sqlServer.healthPort and"),
        (
            _merge(SQL, {"sqlServer": {"connect": {"enabled": True, "tokenSecret": "t", "port": 10002}}}),
            "sqlServer.port, sqlServer.healthPort and sqlServer.connect.port must differ",
        ),
        (_merge(SQL, {"sqlServer": {"sparkConf": {"spark.ui.enabled": "true"}}}), "spark.ui.enabled true"),
    ],
)
def test_contradictory_values_fail_with_the_reason(values: dict[str, Any], error: str) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(values)
    assert error in str(refused.value)


SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def _values(values: Mapping[str, Any], node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, bool]]:
    """(dotted path, whether the schema knows it) of every value: objects the schema closes are walked
    into, free-form ones (resources, annotations, Kafka keys) are one value."""
    properties = node.get("properties", {})
    for key, value in values.items():
        known = key in properties
        if known and isinstance(value, dict) and properties[key].get("additionalProperties") is False:
            yield from _values(value, properties[key], f"{path}{key}.")
        else:
            yield f"{path}{key}", known


def test_values_schema_covers_every_value() -> None:
    assert [path for path, known in _values(DEFAULTS, SCHEMA) if not known] == []
    assert SCHEMA["additionalProperties"] is False


def test_the_charts_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    assert [path for path, _ in _values(DEFAULTS, SCHEMA) if f"| `{path}` |" not in readme] == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_command_the_chart_runs_parses_with_the_telemetry_sink_command_line(variant: str) -> None:
    parser = build_parser()
    for manifest in manifests(VARIANTS[variant]):
        spec = manifest.get("spec", {})
        pod = (
            spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
            or spec.get("template", {}).get("spec")
            or (spec if manifest["kind"] == "Pod" else None)
        )
        for container in (pod or {}).get("containers", []):
            args = [a.replace("$(POD_IP)", "10.0.0.1") for a in container["args"]]
            parsed = parser.parse_args(args)
            assert parsed.command == args[0]


def test_no_pod_gets_service_link_variables_which_the_sink_would_read_as_settings() -> None:
    # a Service named telemetry-sink-... makes TELEMETRY_SINK_SERVICE_HOST & co, unknown settings
    for variant in VARIANTS.values():
        for name, pod in _pods(_merge(variant, {"fullnameOverride": "telemetry-sink"})).items():
            assert pod["enableServiceLinks"] is False, name


def test_with_mtls_the_probes_connect_without_a_handshake_the_kubelet_cannot_complete() -> None:
    sink = one(VARIANTS["tls"], "Deployment", "ts-telemetry-sink")["spec"]["template"]["spec"]["containers"][
        0
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert sink[probe]["tcpSocket"] == {"port": "http"}, probe
    tls_only = one({"tls": {"enabled": True, "existingSecret": "t"}}, "Deployment", "ts-telemetry-sink")
    assert (
        tls_only["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["scheme"]
        == "HTTPS"
    )


def test_prometheus_scrapes_over_tls_trusting_the_servers_ca() -> None:
    endpoint = one(VARIANTS["everything"], "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"] == {"secret": {"name": "sink-tls", "key": "ca.crt"}}
    assert endpoint["tlsConfig"]["serverName"] == "ts-telemetry-sink.telemetry.svc"


def test_the_request_memory_bounds_reach_the_sink(tmp_path: Path) -> None:
    assert load_sink_config({}, tmp_path).server.request_memory_limits() == DEFAULT_REQUEST_MEMORY
    values = {"sink": {"queuedMaxRequestBytes": 1 << 30, "maxRequestBytesPerIp": 1 << 27}}
    limits = load_sink_config(values, tmp_path).server.request_memory_limits()
    assert (limits.max_bytes, limits.max_bytes_per_ip) == (1 << 30, 1 << 27)


def test_large_numbers_render_as_integers() -> None:
    config = yaml.safe_load(sink_config({"sink": {"maxConcurrentRequests": 2000000}}))
    assert config["server"]["max_concurrent_requests"] == 2000000


def test_a_load_balancer_keeps_the_clients_addresses() -> None:
    assert one(VARIANTS["everything"], "Service")["spec"]["externalTrafficPolicy"] == "Local"
    assert "externalTrafficPolicy" not in one({}, "Service")["spec"]


def sql_server_pod(values: Mapping[str, Any]) -> dict[str, Any]:
    return dict(one(values, "Deployment", "ts-telemetry-sink-sql")["spec"]["template"]["spec"])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_sql_server_renders_nothing_by_default() -> None:
    for values in (
        {},
        {"networkPolicy": {"enabled": True}},
        {"sqlServer": {"auth": {"existingSecret": "s"}}},
    ):
        rendered = [m["metadata"]["name"] for m in manifests(values)]
        assert not [name for name in rendered if name.endswith("-sql")], values


@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_an_enabled_sql_server_with_a_password_secret_is_a_valid_deployment_service_and_network_policy(
    kubernetes: str,
) -> None:
    values = _merge(SQL, {"networkPolicy": {"enabled": True}})
    report = helm.lint(str(CHART), values, strict=True, namespace="telemetry")
    assert report["errors"] == []
    sql = [m for m in manifests(values) if m["metadata"]["name"] == "ts-telemetry-sink-sql"]
    assert sorted(m["kind"] for m in sql) == ["Deployment", "NetworkPolicy", "Service"]
    for manifest in sql:
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "sql-server"
        kubernetes_validate.validate(manifest, kubernetes, strict=True)
    assert one(values, "Deployment", "ts-telemetry-sink-sql")["spec"]["replicas"] == 1
    without_policies = [m["kind"] for m in manifests(SQL) if m["metadata"]["name"] == "ts-telemetry-sink-sql"]
    assert sorted(without_policies) == ["Deployment", "Service"]


def test_the_sql_server_listens_on_all_addresses_only_behind_the_mounted_password_file(
    tmp_path: Path,
) -> None:
    pod = sql_server_pod(SQL)
    [server] = pod["containers"]
    args = server["args"]
    assert args[0] == "sql-server"
    assert flag(args, "--host") == "0.0.0.0"
    assert flag(args, "--password-file") == "/etc/telemetry-sink/sql-server/passwords"
    mounts = {m["name"]: m for m in server["volumeMounts"]}
    assert mounts["sql-auth"] == {
        "name": "sql-auth",
        "mountPath": "/etc/telemetry-sink/sql-server",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["sql-auth"]["secret"] == {
        "secretName": "sql-passwords",
        "items": [{"key": "passwords", "path": "passwords"}],
    }
    # the flags satisfy the command's own checks once the Secret's file is where the pod mounts it
    (tmp_path / "sql-server").mkdir()
    (tmp_path / "sql-server" / "passwords").write_text("analyst:pbkdf2_sha256$1$s$h\n")
    parsed = build_parser().parse_args([a.replace("/etc/telemetry-sink/", f"{tmp_path}/") for a in args])
    settings = sql_server_settings(parsed)
    assert settings.problems() == []
    assert (settings.port, settings.health_port, settings.transport) == (10000, 10002, "binary")
    assert (settings.refresh_s, settings.query_timeout_s, settings.max_result_rows) == (30, 300, 100000)
    assert settings.connect_port is None
    assert settings.tls_cert is None


def test_with_ldap_the_sql_server_passes_the_ldap_flags_and_neither_passes_nor_mounts_a_password_file(
    tmp_path: Path,
) -> None:
    pod = sql_server_pod(SQL_LDAP)
    [server] = pod["containers"]
    args = server["args"]
    assert flag(args, "--host") == "0.0.0.0"
    assert flag(args, "--ldap-url") == "ldaps://ldap.example.org:636"
    assert flag(args, "--ldap-base-dn") == "ou=people,dc=example,dc=org"
    assert "--password-file" not in args
    assert {m["name"] for m in server["volumeMounts"]} == {"tmp", "data"}
    assert {v["name"] for v in pod["volumes"]} == {"tmp", "data"}
    # the flags satisfy the command's own checks: LDAP needs no file in the pod
    parsed = build_parser().parse_args([a.replace("/etc/telemetry-sink/", f"{tmp_path}/") for a in args])
    settings = sql_server_settings(parsed)
    assert settings.problems() == []
    assert settings.authentication == "CUSTOM"  # Hive's LDAP check, wrapped in the login gate
    assert settings.ldap_url == "ldaps://ldap.example.org:636"
    assert settings.password_file is None


def test_the_sql_server_reads_the_tables_where_the_rollup_does_with_its_own_spark_settings() -> None:
    for values in (SQL, SQL_EVERYTHING):
        [server] = sql_server_pod(values)["containers"]
        [job] = rollup_pod(values)["containers"]
        for name in ("--data-root", "--storage-option"):
            assert (name in server["args"]) == (name in job["args"])
            if name in job["args"]:
                assert flag(server["args"], name) == flag(job["args"], name)
        assert {m["mountPath"] for m in server["volumeMounts"]} >= {
            m["mountPath"] for m in job["volumeMounts"]
        }
    [server] = sql_server_pod(SQL_EVERYTHING)["containers"]
    assert server["envFrom"] == [{"secretRef": {"name": "sink-s3-read-only"}}]  # its own (T3-3)
    assert flag(server["args"], "--master") == "local[2]"
    assert flag(server["args"], "--conf") == "spark.driver.memory=3g"
    assert server["resources"] == {"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"memory": "6Gi"}}


def test_the_sql_servers_probes_get_healthz_on_the_health_port_and_it_runs_as_an_sre_expects() -> None:
    pod = sql_server_pod(_merge(SQL, {"sqlServer": {"healthPort": 10012}}))
    [server] = pod["containers"]
    assert flag(server["args"], "--health-port") == "10012"
    assert {"name": "health", "containerPort": 10012, "protocol": "TCP"} in server["ports"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server[probe]["httpGet"] == {"path": "/healthz", "port": "health", "scheme": "HTTP"}, probe
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # Spark takes 20-40 s to start
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in server["volumeMounts"]  # Spark's scratch space, Derby
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["affinity"]["podAffinity"]  # beside the front end: they share a ReadWriteOnce volume
    assert "affinity" not in sql_server_pod(SQL_EVERYTHING)  # an object store: anywhere


def test_sql_server_tls_and_spark_connect_add_their_flags_mounts_and_ports(tmp_path: Path) -> None:
    pod = sql_server_pod(SQL_EVERYTHING)
    [server] = pod["containers"]
    args = server["args"]
    assert flag(args, "--password-file") == "/etc/telemetry-sink/sql-server/users"
    assert flag(args, "--tls-cert") == "/etc/telemetry-sink/sql-server-tls/tls.crt"
    assert flag(args, "--tls-key") == "/etc/telemetry-sink/sql-server-tls/tls.key"
    assert flag(args, "--connect-port") == "15002"
    assert flag(args, "--connect-host") == "0.0.0.0"
    assert flag(args, "--connect-token-file") == "/etc/telemetry-sink/sql-server-connect/connect-token"
    assert (flag(args, "--transport"), flag(args, "--http-path")) == ("http", "cliservice")
    mounts = {
        m["name"]: (m["mountPath"], m["readOnly"]) for m in server["volumeMounts"] if m["name"] != "tmp"
    }
    assert mounts == {
        "sql-auth": ("/etc/telemetry-sink/sql-server", True),
        "sql-tls": ("/etc/telemetry-sink/sql-server-tls", True),
        "sql-connect": ("/etc/telemetry-sink/sql-server-connect", True),
    }
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert secrets["sql-tls"]["secretName"] == "sql-tls"
    assert secrets["sql-connect"] == {
        "secretName": "sql-connect",
        "items": [{"key": "connect-token", "path": "connect-token"}],
    }
    assert [p["name"] for p in server["ports"]] == ["jdbc", "spark-connect", "health"]
    service = one(SQL_EVERYTHING, "Service", "ts-telemetry-sink-sql")["spec"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["ports"]] == [
        ("jdbc", 10000, "jdbc"),
        ("spark-connect", 15002, "spark-connect"),
    ]
    # the command's own checks pass with the Secrets' files where the pod mounts them
    for mounted in ("sql-server/users", "sql-server-tls/tls.crt", "sql-server-tls/tls.key"):
        (tmp_path / mounted).parent.mkdir(exist_ok=True)
        (tmp_path / mounted).write_text("")
    (tmp_path / "sql-server-connect").mkdir()
    (tmp_path / "sql-server-connect" / "connect-token").write_text("t0ken\n")
    parsed = build_parser().parse_args([a.replace("/etc/telemetry-sink/", f"{tmp_path}/") for a in args])
    settings = sql_server_settings(parsed)
    assert settings.problems() == []
    assert (settings.connect_port, settings.connect_host) == (15002, "0.0.0.0")
    # without either: no flag, no mount, no port
    [plain] = sql_server_pod(SQL)["containers"]
    assert not {"--tls-cert", "--tls-key", "--connect-port", "--connect-token-file", "--http-path"} & set(
        plain["args"]
    )
    assert {m["name"] for m in plain["volumeMounts"]} == {"tmp", "data", "sql-auth"}
    assert [p["name"] for p in plain["ports"]] == ["jdbc", "health"]


def test_the_sql_service_exposes_jdbc_only_and_the_front_end_objects_do_not_select_the_sql_server() -> None:
    service = one(SQL, "Service", "ts-telemetry-sink-sql")["spec"]
    assert service["type"] == "ClusterIP"
    assert [(p["name"], p["port"]) for p in service["ports"]] == [("jdbc", 10000)]  # no health port
    assert service["selector"]["app.kubernetes.io/component"] == "sql-server"
    pod_labels = one(SQL, "Deployment", "ts-telemetry-sink-sql")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= pod_labels.items()
    frontend = one(SQL, "Service", "ts-telemetry-sink")["spec"]["selector"]
    assert not frontend.items() <= pod_labels.items()
    assert (
        not one(SQL, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    )


def test_the_sql_servers_network_policy_lets_in_only_its_client_ports_from_the_allowed_peers() -> None:
    policy = one(SQL_EVERYTHING, "NetworkPolicy", "ts-telemetry-sink-sql")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "sql-server"
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    [rule] = policy["ingress"]
    assert [p["port"] for p in rule["ports"]] == ["jdbc", "spark-connect"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app": "superset"}}}]
    [anywhere] = one(
        _merge(SQL, {"networkPolicy": {"enabled": True}}), "NetworkPolicy", "ts-telemetry-sink-sql"
    )["spec"]["ingress"]
    assert anywhere == {"ports": [{"port": "jdbc", "protocol": "TCP"}]}  # empty allowedFrom: from anywhere
    frontend = one(SQL_EVERYTHING, "NetworkPolicy", "ts-telemetry-sink")["spec"]
    assert frontend["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "frontend"


def test_prometheus_scrapes_the_sql_servers_metrics_on_its_health_port_through_its_network_policy() -> None:
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    values = _merge(
        SQL_EVERYTHING,
        {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "sqlServer": {"networkPolicy": {"metricsFrom": prometheus}},
        },
    )
    monitor = one(values, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("health", "/metrics", "http")
    pod = one(values, "Deployment", "ts-telemetry-sink-sql")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "health" in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    clients, scrape = one(values, "NetworkPolicy", "ts-telemetry-sink-sql")["spec"]["ingress"]
    assert [p["port"] for p in clients["ports"]] == ["jdbc", "spark-connect"]
    assert scrape == {"ports": [{"port": "health", "protocol": "TCP"}], "from": prometheus}
    assert not [m for m in manifests(SQL_EVERYTHING) if m["kind"] == "PodMonitor"]  # off unless enabled
    assert not [m for m in manifests(VARIANTS["everything"]) if m["kind"] == "PodMonitor"]  # no sql-server


def test_the_notes_say_how_to_reach_the_sql_server_when_it_is_enabled() -> None:
    def notes(values: Mapping[str, Any]) -> str:
        with helm.Chart.load(str(CHART)) as chart:
            rendered = chart.render(dict(values), name="ts", namespace="telemetry")
        [text] = [text for path, text in rendered.items() if path.endswith("NOTES.txt")]
        return str(text)

    assert "sql" not in notes({}).lower()
    text = notes(SQL)
    assert "port-forward svc/ts-telemetry-sink-sql 10000" in text
    assert "jdbc:hive2://localhost:10000/default" in text
    assert "telemetry.<table>" in text
    assert "the password file in Secret sql-passwords" in text
    ldap = notes(SQL_LDAP)
    assert "LDAP binds to ldaps://ldap.example.org:636 as uid=<user>,ou=people,dc=example,dc=org" in ldap
    assert "password file" not in ldap


# -- T3-3, T3-10: the SQL server's access to the lake is read-only below the application ------------


def _pods(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every pod spec the chart renders, by its workload's name."""
    pods = {}
    for manifest in manifests(values):
        spec = manifest.get("spec", {})
        pod = (
            spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
            or spec.get("template", {}).get("spec")
            or (spec if manifest["kind"] == "Pod" else None)
        )
        if pod is not None:
            pods[manifest["metadata"]["name"]] = pod
    return pods


def _data(pod: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod's data volume and its one container's mount of it."""
    [volume] = [v for v in pod["volumes"] if v["name"] == "data"]
    [container] = pod["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "data"]
    return volume, mount


@pytest.mark.parametrize("variant", ["sql server", "sql server with ldap", "sql server on a shared volume"])
def test_T3_3_the_sql_server_mounts_the_data_volume_read_only_and_only_the_writers_mount_it_read_write(
    variant: str,
) -> None:
    values = VARIANTS[variant]
    pods = _pods(values)
    volume, mount = _data(pods["ts-telemetry-sink-sql"])
    # the container's mount and the claim both read-only: the kubelet mounts it so whatever the container asks
    assert mount == {"name": "data", "mountPath": "/var/lib/telemetry-sink/data", "readOnly": True}
    assert volume["persistentVolumeClaim"] == {"claimName": "ts-telemetry-sink-data", "readOnly": True}
    [server] = pods["ts-telemetry-sink-sql"]["containers"]
    assert flag(server["args"], "--data-root") == "/var/lib/telemetry-sink/data"
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    writable = {m["mountPath"] for m in server["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/tmp"}  # Spark's scratch space: an emptyDir of its own, not the lake
    # the writers (the front end lands, the rollup and maintenance commit) mount the same claim read-write
    for name in ("ts-telemetry-sink", "ts-telemetry-sink-rollup", "ts-telemetry-sink-maintain"):
        volume, mount = _data(pods[name])
        assert volume["persistentVolumeClaim"] == {"claimName": "ts-telemetry-sink-data"}, name
        assert mount == {"name": "data", "mountPath": "/var/lib/telemetry-sink/data"}, name


def _secrets_named(node: object) -> set[str]:
    """Every Secret a pod spec names, anywhere in it (envFrom, env, volumes)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "secretName":
                found.add(value)
            elif key in {"secretRef", "secretKeyRef"}:
                found.add(value["name"])
            else:
                found |= _secrets_named(value)
    elif isinstance(node, list):
        for item in node:
            found |= _secrets_named(item)
    return found


def test_T3_3_with_an_object_store_the_sql_server_reads_with_its_own_credentials_never_the_writers() -> None:
    pods = _pods(SQL_EVERYTHING)
    sql = pods.pop("ts-telemetry-sink-sql")
    [server] = sql["containers"]
    assert server["envFrom"] == [{"secretRef": {"name": "sink-s3-read-only"}}]
    assert "sink-s3" not in _secrets_named(sql)  # the writers' Secret appears nowhere in its pod
    assert not [v for v in sql["volumes"] if v["name"] == "data"]
    assert flag(server["args"], "--data-root") == "s3://telemetry/sink"
    assert flag(server["args"], "--storage-option") == "AWS_REGION=eu-west-1"  # non-secret options only
    # every writer still gets the writers' credentials, and none gets the SQL server's
    for name in ("ts-telemetry-sink", "ts-telemetry-sink-rollup", "ts-telemetry-sink-maintain"):
        [container] = pods[name]["containers"]
        assert container["envFrom"] == [{"secretRef": {"name": "sink-s3"}}], name
        assert "sink-s3-read-only" not in _secrets_named(pods[name]), name


def test_T3_3_a_workload_identity_gives_the_sql_server_a_service_account_of_its_own_and_no_secret() -> None:
    pods = _pods(SQL_IDENTITY)
    sql = pods["ts-telemetry-sink-sql"]
    assert sql["serviceAccountName"] == "sql-reader"
    assert sql["automountServiceAccountToken"] is False
    [server] = sql["containers"]
    assert "envFrom" not in server
    assert _secrets_named(sql) == {"sql-passwords"}
    assert pods["ts-telemetry-sink"]["serviceAccountName"] == "ts-telemetry-sink"
    # without one, the chart's ServiceAccount
    assert sql_server_pod(SQL)["serviceAccountName"] == "ts-telemetry-sink"


def _notes(values: Mapping[str, Any]) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(dict(values), name="ts", namespace="telemetry")
    [text] = [text for path, text in rendered.items() if path.endswith("NOTES.txt")]
    return str(text)


def test_T3_3_sharing_the_writers_credentials_is_explicit_and_the_notes_warn() -> None:
    [server] = sql_server_pod(SQL_SHARING)["containers"]
    assert server["envFrom"] == [{"secretRef": {"name": "sink-s3"}}]
    warned = _notes(SQL_SHARING)
    assert "WARNING: sqlServer.objectStore.shareWriterCredentials is true" in warned
    assert "(Secret sink-s3)" in warned
    for values in (SQL, SQL_EVERYTHING, SQL_IDENTITY):
        assert "WARNING: sqlServer.objectStore" not in _notes(values)
    assert "It reads the lake from the volume, mounted read-only." in _notes(SQL)
    assert "with its own credentials, Secret sink-s3-read-only: keep them read-only" in _notes(SQL_EVERYTHING)
    assert "as ServiceAccount sql-reader: keep its role read-only" in _notes(SQL_IDENTITY)


@pytest.mark.parametrize(
    ("values", "error"),
    [
        # an object store and nothing of its own: refused, not the writers' credentials by default
        (
            _merge(OBJECT_STORE, SQL),
            "sqlServer.enabled with storage.type objectStore: give the SQL server read-only credentials of "
            "its own, sqlServer.objectStore.existingSecret",
        ),
        (
            _merge(OBJECT_STORE, _merge(SQL, {"storage": {"objectStore": {"existingSecret": ""}}})),
            "or sqlServer.serviceAccountName (a ServiceAccount a workload identity binds to a read-only",
        ),
        (
            _merge(SQL_SHARING, {"sqlServer": {"objectStore": {"existingSecret": "sink-s3-read-only"}}}),
            "sqlServer.objectStore: set existingSecret (the SQL server's own, read-only credentials) or "
            "shareWriterCredentials (the writers' read-write ones), not both",
        ),
        # credentials in the storage options would reach the SQL server as --storage-option
        (
            _merge(
                SQL_EVERYTHING,
                {"storage": {"objectStore": {"storageOptions": {"AWS_SECRET_ACCESS_KEY": "x"}}}},
            ),
            "storage.objectStore.storageOptions.AWS_SECRET_ACCESS_KEY looks like a credential",
        ),
        (
            _merge(SQL_EVERYTHING, {"storage": {"objectStore": {"storageOptions": {"aws_token": "x"}}}}),
            "storage.objectStore.storageOptions.aws_token looks like a credential",
        ),
        (
            _merge(
                SQL_EVERYTHING,
                {"storage": {"objectStore": {"storageOptions": {"AZURE_STORAGE_ACCOUNT_KEY": "x"}}}},
            ),
            "storage.objectStore.storageOptions.AZURE_STORAGE_ACCOUNT_KEY looks like a credential",
        ),
        # a restricted egress with nowhere to read from: refused rather than a server that cannot start
        (
            _merge(SQL_EVERYTHING, {"sqlServer": {"networkPolicy": {"egress": {"rules": []}}}}),
            "the SQL server's egress is restricted (networkPolicy.enabled) and it reads an object store",
        ),
        (
            _merge(SQL_LDAP, {"sqlServer": {"networkPolicy": {"egress": {"rules": []}}}}),
            "the SQL server's egress is restricted (networkPolicy.enabled) and it checks passwords against "
            "an LDAP server",
        ),
    ],
)
def test_T3_3_T3_10_the_sql_servers_access_is_refused_when_it_is_not_what_it_says(
    values: dict[str, Any], error: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(values)
    assert error in str(refused.value)


def test_T3_3_storage_options_that_are_not_credentials_pass_and_sharing_writers_may_keep_theirs() -> None:
    options = {
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "https://minio.example:9000",
        "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/token",
        "AZURE_STORAGE_ACCOUNT_NAME": "telemetry",
        "aws_conditional_put": "etag",
    }
    [server] = sql_server_pod(
        _merge(SQL_EVERYTHING, {"storage": {"objectStore": {"storageOptions": options}}})
    )["containers"]
    passed = [server["args"][i + 1] for i, a in enumerate(server["args"]) if a == "--storage-option"]
    assert passed == [f"{k}={v}" for k, v in sorted(options.items())]
    # without a SQL server nothing changes for the writers
    render(
        _merge(OBJECT_STORE, {"storage": {"objectStore": {"storageOptions": {"AWS_SECRET_ACCESS_KEY": "x"}}}})
    )
    render(
        _merge(SQL_SHARING, {"storage": {"objectStore": {"storageOptions": {"AWS_SECRET_ACCESS_KEY": "x"}}}})
    )


DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


@pytest.mark.parametrize("kubernetes", KUBERNETES)
def test_T3_10_the_sql_servers_egress_reaches_dns_and_the_store_only(kubernetes: str) -> None:
    policy = one(SQL_EVERYTHING, "NetworkPolicy", "ts-telemetry-sink-sql")
    kubernetes_validate.validate(policy, kubernetes, strict=True)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [{"to": [DNS], "ports": DNS_PORTS}, STORE_EGRESS]
    # LDAP: the directory instead of the store
    assert one(SQL_LDAP, "NetworkPolicy", "ts-telemetry-sink-sql")["spec"]["egress"] == [
        {"to": [DNS], "ports": DNS_PORTS},
        LDAP_EGRESS,
    ]
    # a volume and a password file: DNS only by default, and nothing at all without DNS
    volume = _merge(SQL, {"networkPolicy": {"enabled": True}})
    assert one(volume, "NetworkPolicy", "ts-telemetry-sink-sql")["spec"]["egress"] == [
        {"to": [DNS], "ports": DNS_PORTS}
    ]
    closed = one(
        _merge(volume, {"sqlServer": {"networkPolicy": {"egress": {"dns": []}}}}),
        "NetworkPolicy",
        "ts-telemetry-sink-sql",
    )
    kubernetes_validate.validate(closed, kubernetes, strict=True)
    assert closed["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert closed["spec"]["egress"] == []  # Egress with no rule: no connection out
    # opted out: ingress only, as before
    opened = one(SQL_IDENTITY, "NetworkPolicy", "ts-telemetry-sink-sql")["spec"]
    assert opened["policyTypes"] == ["Ingress"]
    assert "egress" not in opened
    # the front end's policy is unchanged: its egress stays open
    assert one(SQL_EVERYTHING, "NetworkPolicy", "ts-telemetry-sink")["spec"]["policyTypes"] == ["Ingress"]


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (
            {"sqlServer": {"objectStore": {"existingSecret": "Not_A_Name"}}},
            "at '/sqlServer/objectStore/existingSecret'",
        ),
        (
            {"sqlServer": {"objectStore": {"shareWriterCredentials": "yes"}}},
            "at '/sqlServer/objectStore/shareWriterCredentials'",
        ),
        ({"sqlServer": {"serviceAccountName": "Reader!"}}, "at '/sqlServer/serviceAccountName'"),
        (
            {"sqlServer": {"networkPolicy": {"egress": {"restricted": "no"}}}},
            "at '/sqlServer/networkPolicy/egress/restricted'",
        ),
        (
            {
                "sqlServer": {
                    "networkPolicy": {"egress": {"rules": [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}}
                }
            },
            "additional properties 'from' not allowed",
        ),
    ],
)
def test_values_schema_refuses_bad_sql_server_credentials_and_egress(
    values: dict[str, Any], error: str
) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError) as refused:
        chart.validate_schema(values)
    assert error in str(refused.value)
