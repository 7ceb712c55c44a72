"""A small made-up CRD (example.dev Widget, with status and scale subresources) for the emulator's tests."""
import yaml

WIDGET_CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'widgets.example.dev'},
    'spec': {
        'group': 'example.dev', 'scope': 'Namespaced',
        'names': {'kind': 'Widget', 'plural': 'widgets', 'singular': 'widget', 'shortNames': ['wg']},
        'versions': [{
            'name': 'v1', 'served': True, 'storage': True,
            'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}},
            'subresources': {'status': {}, 'scale': {
                'specReplicasPath': '.spec.size', 'statusReplicasPath': '.status.size',
                'labelSelectorPath': '.status.selector'}},
            'additionalPrinterColumns': [
                {'name': 'Size', 'type': 'integer', 'jsonPath': '.spec.size'},
                {'name': 'Ready', 'type': 'string', 'jsonPath': '.status.conditions[?(@.type=="Ready")].status'},
            ],
        }],
    },
}


def widget_yaml(name: str, size: int = 1, labels: dict[str, str] | None = None) -> str:
    return yaml.safe_dump({'apiVersion': 'example.dev/v1', 'kind': 'Widget',
                           'metadata': {'name': name, 'labels': labels or {}}, 'spec': {'size': size}})
