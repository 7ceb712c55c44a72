"""A ScoringFleet's spec: one parse, `fleet.parse_fleet()`, into frozen dataclasses, or a SpecError.

fleet.py           the CR's spec -> FleetSpec (model, image, resources, server, gateway, auth, rollout,
                   scheduling, env) and the cross-field rules; it calls the parsers below for the rest
autoscaling.py     spec.autoscaling -> AutoscalingSpec (also read alone by the replay tool's traces)
network.py         spec.networkPolicy -> NetworkPolicySpec
inference_pool.py  spec.inferencePool -> InferencePoolSpec
sources.py         what the pods read from elsewhere: Secret keys, the cache volume, ConfigMap keys
fields.py          SpecError and typed, bounded reads driven by the CRD's schema node
crd.py             the packaged CRD: every default, bound and enum (never restated here)
quantity.py        Kubernetes quantities
Pure, all of it: no Kubernetes calls, no clock. Nothing is re-exported here: importing one module
must not import the others (context.py reads fields.py, and fleet.py reads context.py).
"""
