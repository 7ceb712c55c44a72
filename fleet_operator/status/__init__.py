"""Pure: a ScoringFleet's status, by what it reports. Two writers share .status, each with its own
fields and conditions; times come in as arguments, never from the clock.

conditions.py   ConditionValue and the one set_condition() for every condition type
ownership.py    who owns which field and condition (per mode); status_patch() refuses the other's
reconciler.py   what the reconciler reports: replicas, selector, SpecValid, Ready, the optional
                children's conditions (ScaledObjectReady, InferencePoolReady)
gateway.py      status.gateway: the gateway's address, ready pods and the fleets it routes to
autoscaler.py   what the native autoscaler reports: its decision, gauges, history and conditions
"""
