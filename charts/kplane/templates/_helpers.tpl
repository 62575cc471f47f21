{{/* Name of every object: <release>-kplane, or the release name if it already says kplane. */}}
{{- define "kplane.fullname" -}}
{{- if contains "kplane" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kplane" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; pass (dict "root" $ "component" "store"). */}}
{{- define "kplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "kplane.selectorLabels" . }}
{{- end -}}

{{/* Labels that select one component's pods. */}}
{{- define "kplane.selectorLabels" -}}
app.kubernetes.io/name: kplane
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kplane.image" -}}
image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{/* The pod-level part every pod shares. */}}
{{- define "kplane.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* The TLS Secret as a volume; mount it at /var/lib/kplane/pki. */}}
{{- define "kplane.pkiVolume" -}}
- name: pki
  secret:
    secretName: {{ .Values.tls.secretName }}
    defaultMode: 0440
{{- end -}}

{{- define "kplane.pkiMount" -}}
- name: pki
  mountPath: /var/lib/kplane/pki
  readOnly: true
{{- end -}}

{{/* A container's environment: pass (dict "root" $ "env" <list of extra EnvVars>). */}}
{{- define "kplane.env" -}}
{{- if or .root.Values.otel.endpoint .env }}
env:
  {{- with .env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- if .root.Values.otel.endpoint }}
  - name: OTEL_EXPORTER_OTLP_ENDPOINT
    value: {{ .root.Values.otel.endpoint | quote }}
  - name: OTEL_TRACES_EXPORTER
    value: otlp
  {{- end }}
{{- end }}
{{- end -}}

{{/* The API service's in-cluster address (its Service), for --server. */}}
{{- define "kplane.apiserverAddr" -}}
{{ include "kplane.fullname" . }}-apiserver.{{ .Release.Namespace }}.svc:6443
{{- end -}}

{{/* The store members' client URLs, comma-separated, for --store-endpoints. */}}
{{- define "kplane.storeEndpoints" -}}
{{- $full := include "kplane.fullname" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.store.replicas) -}}
{{- $eps = append $eps (printf "https://%s-store-%d.%s-store.%s.svc:2379" $full $i $full $.Release.Namespace) -}}
{{- end -}}
{{- join "," $eps -}}
{{- end -}}

{{/* The API client flags of a component; pass (dict "root" $ "identity" "scheduler"). */}}
{{- define "kplane.apiClientArgs" -}}
- --server={{ include "kplane.apiserverAddr" .root }}
- --ca-file=/var/lib/kplane/pki/ca.crt
- --cert-file=/var/lib/kplane/pki/{{ .identity }}.crt
- --key-file=/var/lib/kplane/pki/{{ .identity }}.key
{{- end -}}

{{/* Soft anti-affinity: spread one component's replicas over nodes. */}}
{{- define "kplane.spread" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "kplane.selectorLabels" . | nindent 14 }}
{{- end -}}

{{/*
A component's Deployment. Pass a dict: root, component, replicas, args (the
kplane command line), resources, and optionally ports, probe (an exec
command), volumes and mounts (extra, besides the TLS Secret).
*/}}
{{- define "kplane.deployment" -}}
{{- $sel := dict "root" .root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "kplane.fullname" .root }}-{{ .component }}
  labels:
    {{- include "kplane.labels" $sel | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  selector:
    matchLabels:
      {{- include "kplane.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "kplane.selectorLabels" $sel | nindent 8 }}
    spec:
      {{- include "kplane.podSpec" .root | nindent 6 }}
      {{- include "kplane.spread" $sel | nindent 6 }}
      containers:
        - name: {{ .component }}
          {{- include "kplane.image" .root | nindent 10 }}
          args:
            {{- toYaml .args | nindent 12 }}
          {{- include "kplane.env" (dict "root" .root "env" .env) | nindent 10 }}
          {{- with .ports }}
          ports:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .probe }}
          readinessProbe:
            exec:
              command:
                {{- toYaml . | nindent 16 }}
            periodSeconds: 5
            timeoutSeconds: 4
          livenessProbe:
            exec:
              command:
                {{- toYaml . | nindent 16 }}
            initialDelaySeconds: 15
            periodSeconds: 10
            timeoutSeconds: 4
            failureThreshold: 6
          {{- end }}
          securityContext:
            {{- toYaml .root.Values.securityContext | nindent 12 }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          volumeMounts:
            {{- include "kplane.pkiMount" .root | nindent 12 }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "kplane.pkiVolume" .root | nindent 8 }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/* A PodDisruptionBudget keeping one replica of a component up. */}}
{{- define "kplane.pdb" -}}
{{- $sel := dict "root" .root "component" .component -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "kplane.fullname" .root }}-{{ .component }}
  labels:
    {{- include "kplane.labels" $sel | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "kplane.selectorLabels" $sel | nindent 6 }}
{{- end -}}
