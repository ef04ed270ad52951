{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "threadbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name, unless the release name already contains the chart name. */}}
{{- define "threadbox.fullname" -}}
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

{{- define "threadbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "threadbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "threadbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "threadbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "threadbox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "threadbox.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Docker socket is mounted only for the docker provider with a socket path. */}}
{{- define "threadbox.dockerSocket" -}}
{{- if and (has "docker" (include "threadbox.providers" . | fromJsonArray)) .Values.sandbox.docker.socketPath }}true{{ end }}
{{- end }}

{{/*
The model gateway's socket dir with the Docker provider on the node's engine: a node directory of the
release's own, mounted at the same path, since the engine finds a bind mount's source on the node.
Kept under ~70 bytes: sockets below it need ~37 more, and a unix socket path at most 107.
*/}}
{{- define "threadbox.gatewayDir" -}}
{{- if include "threadbox.dockerSocket" . }}
{{- $dir := printf "%s/%s/%s" (trimSuffix "/" .Values.gateway.hostDir) .Release.Namespace (include "threadbox.fullname" .) }}
{{- if not (hasPrefix "/" $dir) }}
{{- fail (printf "gateway.hostDir %q must be an absolute path" .Values.gateway.hostDir) }}
{{- end }}
{{- if gt (len $dir) 70 }}
{{- fail (printf "the gateway's node directory %q is longer than 70 bytes (unix socket paths below it would not fit): shorten gateway.hostDir or the release name" $dir) }}
{{- end }}
{{- $dir }}
{{- end }}
{{- end }}

{{/* The enabled sandbox providers, as JSON: sandbox.providers, or just sandbox.provider. */}}
{{- define "threadbox.providers" -}}
{{- .Values.sandbox.providers | default (list .Values.sandbox.provider) | toJson }}
{{- end }}
