{{/* Names and labels shared by every template (the conventions of the KEDA and cert-manager charts). */}}

{{/* The chart's name, or nameOverride. */}}
{{- define "scoring-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name of the release's objects. A release already named after the chart is not repeated
("scoring-fleet", not "scoring-fleet-scoring-fleet"). 63 characters: the DNS label limit.
*/}}
{{- define "scoring-fleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* name-version, for the helm.sh/chart label. */}}
{{- define "scoring-fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the operator's pods: never change them after a release (selectors are immutable). */}}
{{- define "scoring-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "scoring-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels on every object the chart renders. */}}
{{- define "scoring-fleet.labels" -}}
helm.sh/chart: {{ include "scoring-fleet.chart" . }}
{{ include "scoring-fleet.selectorLabels" . }}
app.kubernetes.io/part-of: scoring-fleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "scoring-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "scoring-fleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository@digest when a digest is set, else repository:tag (the tag defaulting to appVersion). */}}
{{- define "scoring-fleet.image" -}}
{{- include "scoring-fleet.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/*
The control image (the Dockerfile's target control: the operator and the gateway, no torch): the
operator's own container, and the image it gives gateway pods.
*/}}
{{- define "scoring-fleet.controlImage" -}}
{{- include "scoring-fleet.imageRef" (dict "image" .Values.controlImage "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* repository@digest, or repository:tag (the chart's appVersion when the tag is empty). */}}
{{- define "scoring-fleet.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The rules on ScoringFleets and the fleets' children: granted cluster-wide (all namespaces) or by a
Role in each watched namespace. tests/packaging/test_rbac.py pins them.
*/}}
{{- define "scoring-fleet.namespacedRules" -}}
# Exactly what the operator calls (tests/reliability/test_rbac_used.py records every request).
# The custom resource: kopf lists, watches and patches it (finalizers, its annotations); the
# operator reads it, writes status and the scale subresource (native autoscaling) by merge patch.
# It never creates, replaces or deletes fleets: users do.
- apiGroups: ["scoring.fleet.dev"]
  resources: ["scoringfleets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["scoring.fleet.dev"]
  resources: ["scoringfleets/status", "scoringfleets/scale"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion, which clusters with the
# OwnerReferencesPermissionEnforcement admission plugin allow only with this.
- apiGroups: ["scoring.fleet.dev"]
  resources: ["scoringfleets/finalizers"]
  verbs: ["update"]
# The children: read, created, merge-patched back on drift. Deployments are also watched (hand
# edits are reverted at once); garbage collection deletes them with their fleet. Deleted only
# when the gateway is disabled: its Deployment, Service, ServiceAccount, Role and RoleBinding.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["create", "get", "list", "watch", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["create", "get", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "get", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "get", "patch"]
# Each fleet's NetworkPolicies (its scoring pods', its gateway's), merge-patched back on drift and
# deleted when spec.networkPolicy.enabled is turned off or the gateway is disabled.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "get", "patch", "delete"]
# The HPA is also deleted when a fleet leaves hpa mode.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["create", "get", "patch", "delete"]
# keda mode: the fleet's KEDA ScaledObject (KEDA makes the HPA from it), created, read (its Ready
# condition), merge-patched back on drift, and deleted when a fleet leaves keda mode (every other
# fleet's reconcile asks; without KEDA installed the answer is a 404).
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["create", "get", "patch", "delete"]
# spec.inferencePool: the fleet's InferencePool (Gateway API Inference Extension), created, read,
# merge-patched back on drift, and deleted when disabled (every other fleet's reconcile asks;
# without the CRD installed the answer is a 404).
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["create", "get", "patch", "delete"]
# Pods are listed (by the fleet or gateway label; the autoscaler scrapes each pod's /metrics at its
# podIP) and patched only for their pod-deletion-cost annotation before a scale-down (the idlest go
# first). get and watch only because the gateway's Role grants them: Kubernetes lets the operator
# create a Role (and bind it) only with every right it grants (RBAC escalation rule).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
# Events about reconciles and scaling decisions.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/*
kopf's peering between the operator's replicas: its keep-alives are merge patches of the peering
object's status, which it lists and watches; the leader annotates it; the first replica creates it
(Helm cannot create a custom resource in the release that installs its CRD). The ClusterKopfPeering
with all namespaces, a KopfPeering in each watched namespace.
*/}}
{{- define "scoring-fleet.peeringRules" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ .resource | quote }}]
  verbs: ["create", "get", "list", "watch", "patch"]
{{- end -}}

{{/* Cluster-scoped reads kopf needs in every mode. */}}
{{- define "scoring-fleet.clusterRules" -}}
# kopf lists and watches CRDs to notice when ScoringFleet's is (re)installed.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end -}}

{{/* The peering object's name: operator.peering.name, or the release's full name. */}}
{{- define "scoring-fleet.peeringName" -}}
{{- default (include "scoring-fleet.fullname" .) .Values.operator.peering.name -}}
{{- end -}}

{{/* The operator's command line after `python -m fleet_operator`. */}}
{{- define "scoring-fleet.operatorArgs" -}}
- --peering={{ include "scoring-fleet.peeringName" . }}
- --liveness=http://0.0.0.0:{{ .Values.operator.livenessPort }}/healthz
{{- if eq .Values.operator.logLevel "quiet" }}
- --quiet
{{- else if eq .Values.operator.logLevel "verbose" }}
- --verbose
{{- else if eq .Values.operator.logLevel "debug" }}
- --debug
{{- end }}
{{- if .Values.watchNamespaces }}
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- else }}
- --all-namespaces
{{- end }}
{{- with .Values.operator.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A Prometheus Operator namespaceSelector: the watched namespaces, or all of them. */}}
{{- define "scoring-fleet.monitoredNamespaces" -}}
{{- if .Values.watchNamespaces -}}
matchNames:
  {{- toYaml .Values.watchNamespaces | nindent 2 }}
{{- else -}}
any: true
{{- end -}}
{{- end -}}
