"""Native autoscaling: how many replicas, and why. Read the modules in this order.

values.py    PodSample in; PodVerdict, RawResult, Condition, Decision out, with status forms
history.py   what the windows and rate policies remember between decisions (status.autoscalerHistory)
replicas.py  the replica calculator: group pods, ratio, tolerance, missing/unready pods filled in
behavior.py  stabilization windows, rate policies, the min/max clamp
zero.py      to and from 0 on the gateway's waiting requests: at_zero(), guard_zero()
decide.py    decide(): every stage in order, our two guards and zero's, the message and the conditions
scale_in.py  on a scale-down: each pod's deletion cost (idlest lowest) and the pods expected to go
What it is told, spec.autoscaling, is parsed in fleet_operator/spec/ (autoscaling.py). All of it
is pure (no I/O, no clock: `now` is an argument) and imports nothing of fleet_operator but that and
clock. Its I/O sits beside reconcile.py: fleet_operator/tick.py (one tick of one fleet), scraper.py
(the pods' /metrics) and demand.py (the gateway's waiting requests).
"""
