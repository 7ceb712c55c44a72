"""Cluster: the objects and what each write does to them, with no HTTP in sight.

Owns: the Store, the custom resources registered from CRDs (scale paths, printer columns), create /
update / delete semantics (objects.py rules, finalizers, no-op writes, graceful deletion of pods
bound to a process through the Kubelet), and the fake controllers run soon after a write: CRD
establishment, the Deployment controller (status; pod deletion on a scale-down), garbage collection. It registers CRD
versions into kmock's ResourcesArray (the discovery catalogue) it is given. Event-loop thread only.
"""
import asyncio
import datetime
import secrets
from collections.abc import Callable
from typing import Any

from kube_emulator import controllers, discovery, objects, pods, rollout
from kube_emulator.kmock_seam import ResourceInfo, ResourcesArray, resource
from kube_emulator.kubelet import Kubelet, PodKey
from kube_emulator.objects import ApiError, ScalePaths
from kube_emulator.selectors import format_match_labels, parse_label_selector
from kube_emulator.store import GroupPlural, Store

CRDS: GroupPlural = ('apiextensions.k8s.io', 'customresourcedefinitions')
DEPLOYMENTS: GroupPlural = ('apps', 'deployments')
NAMESPACES: GroupPlural = ('', 'namespaces')
PODS: GroupPlural = ('', 'pods')
_BUILTIN_SCALABLE = {DEPLOYMENTS, ('apps', 'replicasets'), ('apps', 'statefulsets'), ('', 'replicationcontrollers')}


def no_resource() -> ApiError:
    return ApiError(404, 'NotFound', 'the server could not find the requested resource')


def qualified(key: GroupPlural) -> str:
    """`deployments.apps`, `pods`: how the API server names a resource in messages."""
    return f'{key[1]}.{key[0]}' if key[0] else key[1]


class Cluster:
    def __init__(self, resources: ResourcesArray, clock: Callable[[], datetime.datetime]):
        self.resources = resources
        self.clock = clock
        self.store = Store()
        self.kubelet = Kubelet()
        self._custom: dict[tuple[str, str, str], discovery.CrdVersion] = {}
        self._closing = False
        # Set (KubeApi.run_pods): Deployments create their pods and roll them on a template change,
        # and each new Pod is handed to this (on the event loop: it must not block).
        self.pod_starter: Callable[[dict[str, Any]], None] | None = None

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stop the controllers and wake every watch so that it can end."""
        self._closing = True
        self.kubelet.close()
        self.store.wake_all()

    def info(self, key: GroupPlural) -> ResourceInfo:
        for res in self.resources:
            if (res.group, res.plural) == key:
                return self.resources[res]
        raise no_resource()

    def scale_paths(self, res: resource) -> ScalePaths:
        custom = self._custom.get((res.group, res.version, res.plural))
        if custom is not None and custom.scale is not None:
            return custom.scale
        if (res.group, res.plural) in _BUILTIN_SCALABLE:
            return ScalePaths()
        raise no_resource()

    def columns(self, res: resource) -> tuple[dict[str, Any], ...]:
        custom = self._custom.get((res.group, res.version, res.plural))
        return custom.columns if custom else discovery.BUILTIN_COLUMNS.get((res.group, res.plural), ())

    # --- writes ---

    def create(self, key: GroupPlural, ns: str | None, body: Any, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, 'BadRequest', 'the request body must be a JSON object')
        body_ns = (body.get('metadata') or {}).get('namespace')
        if ns is not None and body_ns and body_ns != ns:
            raise ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace'
                           ' sent on the request')
        obj = objects.stamp_new(body, ns, 'status' in self.info(key).subresources, self.clock())
        self._validate(key, obj)
        name = obj['metadata']['name']
        if self.store.get(key, ns, name) is not None:
            raise ApiError(409, 'AlreadyExists', f'{qualified(key)} "{name}" already exists',
                           {'name': name, 'kind': key[1]})
        if dry_run:
            return dict(obj, metadata=dict(obj['metadata'], resourceVersion=str(self.store.resource_version)))
        stored = self.store.put(key, obj, 'ADDED')
        self._after_write(key, stored)
        return stored

    def update(self, key: GroupPlural, old: dict[str, Any], new: dict[str, Any],
               dry_run: bool = False) -> dict[str, Any]:
        """Write new over old; deletes it if it is marked for deletion and its last finalizer went."""
        merged = objects.carry_over(old, new, has_status='status' in self.info(key).subresources)
        self._validate(key, merged)
        if dry_run:
            return merged
        if merged == old:
            return old  # a no-op write: no new resourceVersion, no event (as the API server does)
        if (merged['metadata'].get('deletionTimestamp') and not merged['metadata'].get('finalizers')
                and not (key == PODS and self.kubelet.is_terminating(_pod_key(merged)))):
            return self._remove(key, merged)
        stored = self.store.put(key, merged, 'MODIFIED', old=old)
        self._after_write(key, stored, old)
        return stored

    def delete(self, key: GroupPlural, obj: dict[str, Any], orphan: bool = False,
               grace_s: int | None = None) -> dict[str, Any]:
        """Delete now, or (with finalizers) mark with deletionTimestamp and wait for them to go.

        A pod bound to a process is terminated gracefully instead (grace_s: DeleteOptions'
        gracePeriodSeconds, None for the pod's own): see _terminate_pod.
        """
        if key == PODS and self.kubelet.is_terminating(_pod_key(obj)):
            return obj  # its process is stopping: a second DELETE waits for it too
        if key == PODS and self.kubelet.is_bound(_pod_key(obj)) and not obj['metadata'].get('deletionTimestamp'):
            return self._terminate_pod(obj, grace_s)
        if not obj['metadata'].get('finalizers'):
            return self._remove(key, obj, orphan)
        if obj['metadata'].get('deletionTimestamp'):
            return obj
        marked = dict(obj, metadata=dict(obj['metadata'], deletionTimestamp=objects.now_rfc3339(self.clock())))
        return self.store.put(key, marked, 'MODIFIED', old=obj)

    def _terminate_pod(self, pod: dict[str, Any], grace_s: int | None) -> dict[str, Any]:
        """The kubelet's graceful termination: mark the pod deleted and not ready (one MODIFIED
        event), SIGTERM its process, remove the pod once the process has exited (SIGKILL after
        the grace period); with finalizers left, it stays marked until they go. A grace period of
        0 (`kubectl delete --force --grace-period=0`) removes it at once and SIGKILLs the process."""
        grace = pods.grace_period_s(pod, grace_s)
        if grace == 0:  # a forced delete: the object goes now, the process is killed
            self.kubelet.terminate(_pod_key(pod), 0, lambda: None)
            return self._remove(PODS, pod)
        marked = self.store.put(PODS, pods.marked_terminating(pod, objects.now_rfc3339(self.clock()), grace),
                                'MODIFIED', old=pod)
        self.kubelet.terminate(_pod_key(pod), grace, lambda: self._pod_exited(_pod_key(pod)))
        return marked

    def _pod_exited(self, key: PodKey) -> None:
        pod = self.store.get(PODS, *key)
        if pod is not None and pods.is_terminating(pod) and not pod['metadata'].get('finalizers'):
            self._remove(PODS, pod)

    def _remove(self, key: GroupPlural, obj: dict[str, Any], orphan: bool = False) -> dict[str, Any]:
        final = self.store.remove(key, obj)
        if key == PODS:
            self.kubelet.unbind(_pod_key(final))
        if key == CRDS:
            self._unregister_crd(final)
        if key == NAMESPACES:
            for other in self.store.resources():
                for item in self.store.objects(other, final['metadata']['name']):
                    self.delete(other, item)
        if not orphan:
            self._soon(self._collect_garbage)
        if key == PODS and self.pod_starter is not None:
            self._soon(self._roll_namespace, final['metadata'].get('namespace') or 'default')
        return final

    def _validate(self, key: GroupPlural, obj: dict[str, Any]) -> None:
        if key == CRDS:
            try:
                discovery.crd_versions(obj)
            except (KeyError, TypeError) as e:
                raise ApiError(422, 'Invalid', f'CustomResourceDefinition is invalid: missing {e}') from e

    # --- what follows a write: CRD registration and the fake controllers ---

    def _after_write(self, key: GroupPlural, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        if key == CRDS:
            self._register_crd(obj)
            self._soon(self._establish_crd, obj['metadata']['name'])
        if key == DEPLOYMENTS and not obj['metadata'].get('deletionTimestamp'):
            self._soon(self._reconcile_deployment, obj['metadata']['namespace'], obj['metadata']['name'])
            if old is not None and controllers.replicas(obj) < controllers.replicas(old):
                self._soon(self._scale_down, obj['metadata']['namespace'], obj['metadata']['name'])
        if key == PODS and self.pod_starter is not None:
            self._soon(self._roll_namespace, obj['metadata'].get('namespace') or 'default')

    def _soon(self, callback: Callable[..., None], *args: Any) -> None:
        # Controllers act after the write's response, as real ones do; none run once closing.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # writes made before serving (seeding) need no controller
        loop.call_soon(self._run_controller, callback, *args)

    def _run_controller(self, callback: Callable[..., None], *args: Any) -> None:
        if not self._closing:
            callback(*args)

    def _register_crd(self, crd: dict[str, Any]) -> None:
        self._unregister_crd(crd, keep_objects=True)
        for version in discovery.crd_versions(crd):
            self.resources[version.res] = version.info
            self._custom[(version.res.group, version.res.version, version.res.plural)] = version

    def _unregister_crd(self, crd: dict[str, Any], keep_objects: bool = False) -> None:
        spec = crd.get('spec') or {}
        group, plural = spec.get('group'), (spec.get('names') or {}).get('plural')
        for res in [res for res in self.resources if (res.group, res.plural) == (group, plural)]:
            del self.resources[res]
            self._custom.pop((res.group, res.version, res.plural), None)
        if not keep_objects:
            # NOTE: the real API server waits for the objects' finalizers; this drops them at once.
            for obj in self.store.objects((group, plural)):
                self._remove((group, plural), obj)

    def _establish_crd(self, name: str) -> None:
        crd = self.store.get(CRDS, None, name)
        if crd is None:
            return
        status = discovery.crd_status(crd, objects.now_rfc3339(self.clock()))
        old = crd.get('status') or {}
        established = any(c['type'] == 'Established' and c['status'] == 'True' for c in old.get('conditions') or [])
        if not established or old.get('acceptedNames') != status['acceptedNames']:
            self.update(CRDS, crd, dict(crd, status=status))

    def _reconcile_deployment(self, namespace: str, name: str) -> None:
        deployment = self.store.get(DEPLOYMENTS, namespace, name)
        if deployment is None or deployment['metadata'].get('deletionTimestamp'):
            return
        status = controllers.deployment_status(deployment, objects.now_rfc3339(self.clock()))
        if self.pod_starter is not None:
            selected = self._selected_pods(deployment)
            self._roll(deployment, selected)
            status.update(rollout.deployment_status(deployment, self._selected_pods(deployment)))
        if deployment.get('status') != status:
            self.update(DEPLOYMENTS, deployment, dict(deployment, status=status))

    def _roll_namespace(self, namespace: str) -> None:
        """A pod changed (created, ready or not, terminating, gone): every Deployment of its
        namespace takes its next rolling-update step and reports its pods."""
        for deployment in self.store.objects(DEPLOYMENTS, namespace):
            self._reconcile_deployment(namespace, deployment['metadata']['name'])

    def _roll(self, deployment: dict[str, Any], selected: list[dict[str, Any]]) -> None:
        """The ReplicaSets' part, with pods on: create the new template's pods, delete old ones
        (rollout.step), and hand each new pod to the pod starter."""
        step = rollout.step(deployment, selected)
        for pod in step.delete:
            self.delete(PODS, pod)
        for _ in range(step.create):
            created = self.create(PODS, deployment['metadata']['namespace'],
                                  rollout.pod_for(deployment, secrets.token_hex(3)))
            if self.pod_starter is not None:
                self.pod_starter(created)

    def _selected_pods(self, deployment: dict[str, Any]) -> list[dict[str, Any]]:
        selector = (deployment.get('spec') or {}).get('selector')
        if not selector:
            return []
        selects = parse_label_selector(format_match_labels(selector))
        return [pod for pod in self.store.objects(PODS, deployment['metadata']['namespace']) if selects(pod)]

    def _scale_down(self, namespace: str, name: str) -> None:
        """The ReplicaSet controller on a scale-down: delete the surplus of the Deployment's
        selected, non-terminating pods, in Kubernetes' order (pods.pods_to_delete)."""
        deployment = self.store.get(DEPLOYMENTS, namespace, name)
        selector = (deployment or {}).get('spec', {}).get('selector')
        if deployment is None or not selector or deployment['metadata'].get('deletionTimestamp'):
            return
        selects = parse_label_selector(format_match_labels(selector))
        selected = [pod for pod in self.store.objects(PODS, namespace) if selects(pod)]
        for pod in pods.pods_to_delete(selected, controllers.replicas(deployment)):
            self.delete(PODS, pod)

    def _collect_garbage(self) -> None:
        live = {obj['metadata']['uid'] for key in self.store.resources() for obj in self.store.objects(key)}
        for key in self.store.resources():
            for obj in self.store.objects(key):
                if controllers.is_orphaned(obj, live) and not obj['metadata'].get('deletionTimestamp'):
                    self.delete(key, obj)


def _pod_key(pod: dict[str, Any]) -> PodKey:
    return pod['metadata'].get('namespace') or 'default', pod['metadata']['name']
