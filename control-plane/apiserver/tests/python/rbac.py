"""The official Python kubernetes client as a user RBAC grants only reading pods in `team`;
prints one JSON line: what it listed and the status of what it was refused.

Usage: rbac.py KUBECONFIG
"""
import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
results = {"team": sorted(p.metadata.name for p in core.list_namespaced_pod("team").items)}
for name, call in [
    ("default", lambda: core.list_namespaced_pod("default")),
    ("create", lambda: core.create_namespaced_config_map(
        "team", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope")))),
]:
    try:
        call()
        results[name] = "allowed"
    except ApiException as e:
        body = json.loads(e.body)
        results[name] = {"status": e.status, "reason": body.get("reason"), "message": body.get("message")}
print(json.dumps(results))
