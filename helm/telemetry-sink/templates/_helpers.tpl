{{/* The chart's name, at most 63 characters. */}}
{{- define "telemetry-sink.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, at most 63 characters (the release name alone when it holds the chart's). */}}
{{- define "telemetry-sink.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "telemetry-sink.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The standard labels (app.kubernetes.io/*) of every object. */}}
{{- define "telemetry-sink.labels" -}}
helm.sh/chart: {{ include "telemetry-sink.chart" . }}
{{ include "telemetry-sink.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: telemetry-sink
{{- end }}

{{- define "telemetry-sink.selectorLabels" -}}
app.kubernetes.io/name: {{ include "telemetry-sink.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The front end's pods. */}}
{{- define "telemetry-sink.frontendSelectorLabels" -}}
{{ include "telemetry-sink.selectorLabels" . }}
app.kubernetes.io/component: frontend
{{- end }}

{{/* The long-running rollup's pods. */}}
{{- define "telemetry-sink.rollupSelectorLabels" -}}
{{ include "telemetry-sink.selectorLabels" . }}
app.kubernetes.io/component: rollup
{{- end }}

{{/* The SQL server's pods. */}}
{{- define "telemetry-sink.sqlServerSelectorLabels" -}}
{{ include "telemetry-sink.selectorLabels" . }}
app.kubernetes.io/component: sql-server
{{- end }}

{{- define "telemetry-sink.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "telemetry-sink.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "telemetry-sink.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) }}
{{- end }}

{{/* Where the Delta tables are: the volume's mount point, or the object store's URI. */}}
{{- define "telemetry-sink.dataRoot" -}}
{{- if eq .Values.storage.type "pvc" }}/var/lib/telemetry-sink/data{{ else }}{{ .Values.storage.objectStore.uri }}{{ end }}
{{- end }}

{{- define "telemetry-sink.claimName" -}}
{{- default (printf "%s-data" (include "telemetry-sink.fullname" .)) .Values.storage.pvc.existingClaim }}
{{- end }}

{{/* True when a ReadWriteOnce volume holds the data: every pod that mounts it must share a node. */}}
{{- define "telemetry-sink.sharedNode" -}}
{{- if and (eq .Values.storage.type "pvc") (not (has "ReadWriteMany" .Values.storage.pvc.accessModes)) }}true{{ end }}
{{- end }}

{{/* The pod's terminationGracePeriodSeconds: the preStop pause, then the sink's shutdown budget
(server.shutdown_grace_s + server.shutdown_flush_s, ingest.server.shutdown_budget_s), and a margin to
exit, rounded up to whole seconds. */}}
{{- define "telemetry-sink.terminationGracePeriodSeconds" -}}
{{- with .Values.sink }}
{{- addf .preStopSleepSeconds .shutdownGraceSeconds .shutdownFlushSeconds .terminationGraceMarginSeconds | ceil | int64 }}
{{- end }}
{{- end }}

{{/* Refuse values that contradict each other (rendering fails with the reason). */}}
{{- define "telemetry-sink.validate" -}}
{{- if and (eq .Values.storage.type "objectStore") (not .Values.storage.objectStore.uri) }}
{{- fail "storage.type is objectStore: set storage.objectStore.uri (e.g. s3://bucket/telemetry)" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled: set tls.existingSecret to a kubernetes.io/tls Secret (tls.crt, tls.key)" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) }}
{{- fail "tls.clientAuth needs tls.enabled" }}
{{- end }}
{{- if and .Values.auth.existingSecret (not .Values.tls.enabled) }}
{{- fail "auth.existingSecret: bearer tokens need tls.enabled (without TLS they cross the network in clear)" }}
{{- end }}
{{- if and .Values.sink.trustedProxyPrincipals (not .Values.tls.clientAuth) }}
{{- fail "sink.trustedProxyPrincipals needs tls.clientAuth: a proxy is known by its client certificate" }}
{{- end }}
{{- if and .Values.sink.requireAuthentication .Values.kafkaListener.enabled (not .Values.tls.clientAuth) }}
{{- fail "sink.requireAuthentication with the Kafka listener needs tls.clientAuth: the Kafka port has no SASL, its clients authenticate with certificates" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.tls.clientAuth (not .Values.serviceMonitor.clientCertSecret) }}
{{- fail "serviceMonitor with tls.clientAuth: set serviceMonitor.clientCertSecret to Prometheus's client certificate Secret" }}
{{- end }}
{{- if gt (len (include "telemetry-sink.fullname" .)) 43 }}
{{- fail "the release's full name is longer than 43 characters (CronJob names are at most 52): use a shorter release name or fullnameOverride" }}
{{- end }}
{{- if and .Values.tests.enabled .Values.tls.clientAuth (not .Values.tests.clientCertSecret) }}
{{- fail "helm test with tls.clientAuth: set tests.clientCertSecret to the test client's kubernetes.io/tls Secret (or tests.enabled false)" }}
{{- end }}
{{- if include "telemetry-sink.sharedNode" . }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- fail "a ReadWriteOnce volume cannot be shared by several front-end replicas on different nodes: set storage.pvc.accessModes to [ReadWriteMany], use storage.type objectStore, or replicaCount 1 without autoscaling" }}
{{- end }}
{{- if and .Values.rollup.enabled (eq .Values.rollup.mode "kubernetes") }}
{{- fail "rollup.mode kubernetes runs executors on other nodes: they cannot mount a ReadWriteOnce volume (use ReadWriteMany or an object store)" }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas is above autoscaling.maxReplicas" }}
{{- end }}
{{- with .Values.sqlServer }}
{{- if .enabled }}
{{- if and .auth.existingSecret .auth.ldap.url }}
{{- fail "sqlServer.auth: set sqlServer.auth.existingSecret (a password file) or sqlServer.auth.ldap.url (an LDAP bind), not both: they are two ways to check passwords and telemetry-sink sql-server refuses both at once" }}
{{- end }}
{{- if and .auth.ldap.url (not .auth.ldap.baseDN) }}
{{- fail "sqlServer.auth.ldap.url needs sqlServer.auth.ldap.baseDN (e.g. ou=people,dc=example,dc=org): users bind as uid=<user>,<baseDN>" }}
{{- end }}
{{- if and .auth.ldap.baseDN (not .auth.ldap.url) }}
{{- fail "sqlServer.auth.ldap.baseDN needs sqlServer.auth.ldap.url (ldap:// or ldaps://HOST[:PORT]): the two go together" }}
{{- end }}
{{- if not (or .auth.existingSecret .auth.ldap.url) }}
{{- fail "sqlServer.enabled: set sqlServer.auth.existingSecret to a Secret holding the password file (telemetry-sink sql-server --hash-password USER), or sqlServer.auth.ldap.url and sqlServer.auth.ldap.baseDN to check passwords by an LDAP bind: the server listens on 0.0.0.0, beyond loopback, and refuses to start without one" }}
{{- end }}
{{- if and .connect.enabled (not .connect.tokenSecret) }}
{{- fail "sqlServer.connect.enabled: set sqlServer.connect.tokenSecret to a Secret holding Spark Connect's pre-shared token: it listens on 0.0.0.0, beyond loopback, and refuses to start without one" }}
{{- end }}
{{- $ports := list (int .port) (int .healthPort) }}
{{- if .connect.enabled }}{{ $ports = append $ports (int .connect.port) }}{{ end }}
{{- if ne (len $ports) (len (uniq $ports)) }}
{{- fail "sqlServer.port, sqlServer.healthPort and sqlServer.connect.port must differ" }}
{{- end }}
{{- if eq (lower (toString (index .sparkConf "spark.ui.enabled" | default "false"))) "true" }}
{{- fail "sqlServer.sparkConf: spark.ui.enabled true is refused by telemetry-sink sql-server (the Spark UI would show every client's queries)" }}
{{- end }}
{{- if eq (lower (toString (index .sparkConf "spark.sql.hive.thriftServer.singleSession" | default "false"))) "true" }}
{{- fail "sqlServer.sparkConf: spark.sql.hive.thriftServer.singleSession true is refused by telemetry-sink sql-server (clients would share views)" }}
{{- end }}
{{- /* T3-3: the SQL server reads the lake with credentials of its own, which can be read-only */}}
{{- if eq $.Values.storage.type "objectStore" }}
{{- if and .objectStore.existingSecret .objectStore.shareWriterCredentials }}
{{- fail "sqlServer.objectStore: set existingSecret (the SQL server's own, read-only credentials) or shareWriterCredentials (the writers' read-write ones), not both" }}
{{- end }}
{{- if not (or .objectStore.existingSecret .serviceAccountName .objectStore.shareWriterCredentials) }}
{{- fail "sqlServer.enabled with storage.type objectStore: give the SQL server read-only credentials of its own, sqlServer.objectStore.existingSecret (a Secret of environment variables, e.g. a read-only user's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or sqlServer.serviceAccountName (a ServiceAccount a workload identity binds to a read-only role); or set sqlServer.objectStore.shareWriterCredentials true to give it the writers' read-write credentials (then nothing below its SQL guard stops a write to the lake)" }}
{{- end }}
{{- range $key, $_ := (ternary (dict) $.Values.storage.objectStore.storageOptions .objectStore.shareWriterCredentials) }}
{{- if regexMatch "(?i)(secret|access_key|account_key|service_account_key|password|(^|_)token$|(^|_)sas(_|$))" $key }}
{{- fail (printf "storage.objectStore.storageOptions.%s looks like a credential: storage options are passed to every pod, the SQL server's too; put the writers' credentials in storage.objectStore.existingSecret and the SQL server's in sqlServer.objectStore.existingSecret" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $.Values.networkPolicy.enabled .networkPolicy.egress.restricted (not .networkPolicy.egress.rules) }}
{{- if eq $.Values.storage.type "objectStore" }}
{{- fail "sqlServer.networkPolicy.egress.rules: the SQL server's egress is restricted (networkPolicy.enabled) and it reads an object store: list the store's endpoint (e.g. [{to: [{ipBlock: {cidr: 52.218.0.0/17}}], ports: [{port: 443, protocol: TCP}]}]), or set sqlServer.networkPolicy.egress.restricted false" }}
{{- end }}
{{- if .auth.ldap.url }}
{{- fail "sqlServer.networkPolicy.egress.rules: the SQL server's egress is restricted (networkPolicy.enabled) and it checks passwords against an LDAP server: list the directory (e.g. [{to: [{ipBlock: {cidr: 10.0.5.10/32}}], ports: [{port: 636, protocol: TCP}]}]), or set sqlServer.networkPolicy.egress.restricted false" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.kafkaListener.enabled (has (int .Values.kafkaListener.port) (list 4317 4318 (int .Values.service.grpcPort) (int .Values.service.httpPort))) }}
{{- fail "kafkaListener.port must differ from the gRPC and HTTP ports (4317, 4318 on the pods; service.grpcPort and service.httpPort on the Service)" }}
{{- end }}
{{- end }}

{{/* A probe of the HTTP port: GET the path (HTTPS with TLS); a TCP connect with mTLS, where the
kubelet has no client certificate to complete a handshake with. */}}
{{- define "telemetry-sink.probe" -}}
{{- $ := index . 0 }}
{{- if $.Values.tls.clientAuth }}
tcpSocket:
  port: http
{{- else }}
httpGet:
  path: {{ index . 1 }}
  port: http
  scheme: {{ include "telemetry-sink.scheme" $ }}
{{- end }}
{{- end }}

{{/* The HTTP probes' scheme. */}}
{{- define "telemetry-sink.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Volumes every pod that reads or writes the tables has: /tmp, and the data volume. */}}
{{- define "telemetry-sink.dataVolumes" -}}
{{- include "telemetry-sink.dataVolumesOf" (list . false) }}
{{- end }}

{{/* The same for a pod that only reads the tables (the SQL server): the claim read-only, so that the
kubelet mounts it read-only whatever the container asks. */}}
{{- define "telemetry-sink.readOnlyDataVolumes" -}}
{{- include "telemetry-sink.dataVolumesOf" (list . true) }}
{{- end }}

{{- define "telemetry-sink.dataVolumesOf" -}}
{{- $ := index . 0 }}
- name: tmp
  emptyDir: {}
{{- if eq $.Values.storage.type "pvc" }}
- name: data
  persistentVolumeClaim:
    claimName: {{ include "telemetry-sink.claimName" $ }}
    {{- if index . 1 }}
    readOnly: true
    {{- end }}
{{- end }}
{{- end }}

{{- define "telemetry-sink.dataVolumeMounts" -}}
{{- include "telemetry-sink.dataVolumeMountsOf" (list . false) }}
{{- end }}

{{/* The SQL server's: the data volume read-only (T3-3: what its guard misses cannot write). */}}
{{- define "telemetry-sink.readOnlyDataVolumeMounts" -}}
{{- include "telemetry-sink.dataVolumeMountsOf" (list . true) }}
{{- end }}

{{- define "telemetry-sink.dataVolumeMountsOf" -}}
{{- $ := index . 0 }}
- name: tmp
  mountPath: /tmp
{{- if eq $.Values.storage.type "pvc" }}
- name: data
  mountPath: /var/lib/telemetry-sink/data
  {{- if index . 1 }}
  readOnly: true
  {{- end }}
{{- end }}
{{- end }}

{{/* Object-store credentials, as environment variables of every pod. */}}
{{- define "telemetry-sink.storageEnvFrom" -}}
{{- if and (eq .Values.storage.type "objectStore") .Values.storage.objectStore.existingSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.storage.objectStore.existingSecret }}
{{- end }}
{{- end }}

{{/* The SQL server's object-store credentials: its own Secret (sqlServer.objectStore.existingSecret,
read-only credentials), or the writers' only when sqlServer.objectStore.shareWriterCredentials says so;
with neither, none (it then has a ServiceAccount of its own: the validation refuses anything else). */}}
{{- define "telemetry-sink.sqlServerStorageEnvFrom" -}}
{{- if eq .Values.storage.type "objectStore" }}
{{- with .Values.sqlServer.objectStore }}
{{- if .existingSecret }}
envFrom:
  - secretRef:
      name: {{ .existingSecret }}
{{- else if .shareWriterCredentials }}
{{- include "telemetry-sink.storageEnvFrom" $ }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The SQL server's ServiceAccount: its own (e.g. bound to a read-only role by a workload identity), or
the chart's. */}}
{{- define "telemetry-sink.sqlServerServiceAccountName" -}}
{{- default (include "telemetry-sink.serviceAccountName" .) .Values.sqlServer.serviceAccountName }}
{{- end }}

{{/* The --data-root and --storage-option arguments of the Spark and maintenance commands. */}}
{{- define "telemetry-sink.lakeArgs" -}}
- --data-root
- {{ include "telemetry-sink.dataRoot" . | quote }}
{{- if eq .Values.storage.type "objectStore" }}
{{- range $key, $value := .Values.storage.objectStore.storageOptions }}
- --storage-option
- {{ printf "%s=%s" $key (toString $value) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Keep a rollup's or a CronJob's pod on the front end's node when they share a ReadWriteOnce volume. */}}
{{- define "telemetry-sink.jobAffinity" -}}
{{- if include "telemetry-sink.sharedNode" . }}
affinity:
  podAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchLabels:
            {{- include "telemetry-sink.frontendSelectorLabels" . | nindent 12 }}
        topologyKey: kubernetes.io/hostname
{{- end }}
{{- end }}

{{/* The rollup's pod (metadata and spec), for the Deployment (``rollup --every``) and the CronJob
(``rollup --once``): (dict "root" . "once" BOOL "restartPolicy" POLICY). */}}
{{- define "telemetry-sink.rollupPod" -}}
{{- $root := .root }}
{{- $kubernetes := eq $root.Values.rollup.mode "kubernetes" -}}
metadata:
  labels:
    {{- include "telemetry-sink.labels" $root | nindent 4 }}
    app.kubernetes.io/component: rollup
spec:
  restartPolicy: {{ .restartPolicy }}
  enableServiceLinks: false
  {{- if $kubernetes }}
  serviceAccountName: {{ include "telemetry-sink.fullname" $root }}-spark
  automountServiceAccountToken: true
  {{- else }}
  serviceAccountName: {{ include "telemetry-sink.serviceAccountName" $root }}
  automountServiceAccountToken: false
  {{- end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  {{- include "telemetry-sink.jobAffinity" $root | nindent 2 }}
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: rollup
      image: {{ include "telemetry-sink.image" $root | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args:
        - rollup
        {{- if .once }}
        - --once
        {{- else }}
        - --every
        - {{ $root.Values.rollup.everySeconds | quote }}
        {{- end }}
        {{- include "telemetry-sink.lakeArgs" $root | nindent 8 }}
        {{- if $kubernetes }}
        # client mode: the driver is this pod, the executors are pods of the cluster
        - --master
        - k8s://https://kubernetes.default.svc:443
        - --conf
        - spark.kubernetes.namespace={{ $root.Release.Namespace }}
        - --conf
        - spark.kubernetes.container.image={{ include "telemetry-sink.image" $root }}
        - --conf
        - spark.kubernetes.driver.pod.name=$(POD_NAME)
        - --conf
        - spark.kubernetes.authenticate.executor.serviceAccountName={{ include "telemetry-sink.serviceAccountName" $root }}
        - --conf
        - spark.kubernetes.executor.podNamePrefix={{ include "telemetry-sink.fullname" $root | trunc 40 | trimSuffix "-" }}-rollup
        - --conf
        - spark.kubernetes.executor.podTemplateFile=/etc/telemetry-sink/spark/executor.yaml
        - --conf
        - spark.kubernetes.executor.podTemplateContainerName=executor
        - --conf
        - spark.executor.memoryOverhead={{ $root.Values.rollup.kubernetes.executorMemoryOverhead }}
        {{- with $root.Values.imagePullSecrets }}
        - --conf
        - spark.kubernetes.container.image.pullSecrets={{ join "," (pluck "name" .) }}
        {{- end }}
        - --conf
        - spark.executor.instances={{ $root.Values.rollup.kubernetes.executorInstances }}
        - --conf
        - spark.executor.cores={{ $root.Values.rollup.kubernetes.executorCores }}
        - --conf
        - spark.executor.memory={{ $root.Values.rollup.kubernetes.executorMemory }}
        - --conf
        - spark.driver.host=$(POD_IP)
        - --conf
        - spark.driver.bindAddress=0.0.0.0
        - --conf
        - spark.driver.port={{ $root.Values.rollup.kubernetes.driverPort }}
        - --conf
        - spark.driver.blockManager.port={{ $root.Values.rollup.kubernetes.blockManagerPort }}
        {{- if eq $root.Values.storage.type "pvc" }}
        - --conf
        - spark.kubernetes.executor.volumes.persistentVolumeClaim.data.options.claimName={{ include "telemetry-sink.claimName" $root }}
        - --conf
        - spark.kubernetes.executor.volumes.persistentVolumeClaim.data.mount.path=/var/lib/telemetry-sink/data
        {{- end }}
        {{- else }}
        - --master
        - local[{{ $root.Values.rollup.localCores }}]
        {{- end }}
        {{- range $key, $value := $root.Values.rollup.sparkConf }}
        - --conf
        - {{ printf "%s=%s" $key (toString $value) | quote }}
        {{- end }}
      env:
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
      {{- include "telemetry-sink.storageEnvFrom" $root | nindent 6 }}
      {{- if $kubernetes }}
      ports:
        - name: spark-driver
          containerPort: {{ $root.Values.rollup.kubernetes.driverPort }}
        - name: spark-blocks
          containerPort: {{ $root.Values.rollup.kubernetes.blockManagerPort }}
      {{- end }}
      resources:
        {{- toYaml $root.Values.rollup.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "telemetry-sink.dataVolumeMounts" $root | nindent 8 }}
        {{- if $kubernetes }}
        - name: spark-templates
          mountPath: /etc/telemetry-sink/spark
          readOnly: true
        {{- end }}
  volumes:
    {{- include "telemetry-sink.dataVolumes" $root | nindent 4 }}
    {{- if $kubernetes }}
    - name: spark-templates
      configMap:
        name: {{ include "telemetry-sink.fullname" $root }}-spark
    {{- end }}
{{- end }}
