"""Spec fields that name what the pods read from elsewhere: a Secret's key, a volume for the cache,
a ConfigMap's key (spec.server.rerankTemplate.configMapKeyRef, mounted as a file).

spec.auth.apiKeySecretRef and spec.model.hfTokenSecretRef are SecretKeyRefs (the builders turn them
into env `valueFrom.secretKeyRef`, so a key never appears in args or the pod spec); spec.model.cache
is one Pod volume source. The API server checks a volume source's contents against the Pod schema;
here only its shape, since the emulator (and an API server without our schema) checks nothing.
Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet_operator.spec.fields import SpecError, as_object

# core/v1 VolumeSource's fields that can hold a model cache. Not configMap, secret, downwardAPI or
# projected (size-limited API objects), nor the deprecated gitRepo.
VOLUME_SOURCES = frozenset({
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "emptyDir",
    "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "glusterfs", "hostPath",
    "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
    "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
})
# Sources that are mounted read-only whatever the volume says.
ALWAYS_READ_ONLY = frozenset({"image"})


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of a Secret in the fleet's namespace."""

    name: str
    key: str

    def env(self, var: str) -> dict[str, Any]:
        """The EnvVar that reads this key into `var` (the kubelet resolves it; a missing Secret
        keeps the pod in CreateContainerConfigError, which says so)."""
        return {"name": var, "valueFrom": {"secretKeyRef": {"name": self.name, "key": self.key}}}


@dataclass(frozen=True)
class VolumeSource:
    """spec.model.cache: which source (`kind`, e.g. persistentVolumeClaim) and its settings."""

    kind: str
    settings: Mapping[str, Any]

    @property
    def read_only(self) -> bool:
        """A cache the pods cannot write: mounted readOnly, and the hub client must stay offline."""
        return self.kind in ALWAYS_READ_ONLY or self.settings.get("readOnly") is True

    def volume(self, name: str) -> dict[str, Any]:
        """The Pod volume `name` with this source."""
        return {"name": name, self.kind: dict(self.settings)}


def parse_secret_ref(value: Any, path: str) -> SecretKeyRef | None:
    """{name, key} -> SecretKeyRef; None when the field is left out."""
    if value is None:
        return None
    ref = as_object(value, path)
    for key in ("name", "key"):
        if not isinstance(ref.get(key), str) or not ref[key]:
            raise SpecError(f"{path}.{key} is required (a Secret in the fleet's namespace, and the key "
                            "that holds the value)")
    return SecretKeyRef(name=ref["name"], key=ref["key"])


@dataclass(frozen=True)
class ConfigMapKeyRef:
    """One key of a ConfigMap in the fleet's namespace, read by the server as a file."""

    name: str
    key: str

    def volume(self, volume_name: str, file_name: str) -> dict[str, Any]:
        """The Pod volume `volume_name` holding only this key, as `file_name` (a missing ConfigMap
        or key keeps the pod in ContainerCreating, whose events say so)."""
        return {"name": volume_name,
                "configMap": {"name": self.name, "items": [{"key": self.key, "path": file_name}]}}


def parse_config_map_ref(value: Any, path: str) -> ConfigMapKeyRef:
    """{name, key} -> ConfigMapKeyRef."""
    ref = as_object(value, path, required=True)
    for key in ("name", "key"):
        if not isinstance(ref.get(key), str) or not ref[key]:
            raise SpecError(f"{path}.{key} is required (a ConfigMap in the fleet's namespace, and the "
                            "key that holds the template)")
    return ConfigMapKeyRef(name=ref["name"], key=ref["key"])


def parse_volume_source(value: Any, path: str) -> VolumeSource | None:
    """One Pod volume source, e.g. {persistentVolumeClaim: {claimName: x}}; None when left out."""
    if value is None:
        return None
    source = as_object(value, path)
    if len(source) != 1:
        raise SpecError(f"{path} must name exactly one volume source (e.g. persistentVolumeClaim), "
                        f"got {sorted(source) or 'none'}")
    [(kind, settings)] = source.items()
    if kind not in VOLUME_SOURCES:
        raise SpecError(f"{path}.{kind} is not a volume source for a model cache; one of "
                        f"{', '.join(sorted(VOLUME_SOURCES))}")
    return VolumeSource(kind=kind, settings=as_object(settings, f"{path}.{kind}"))
