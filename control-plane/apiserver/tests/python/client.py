"""Drives keel-apiserver with the official Python kubernetes client; prints one JSON line of results.

Usage: client.py KUBECONFIG
"""
import json
import sys

from kubernetes import client, config, watch

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
results = {}

core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py")))
for i in range(5):
    core.create_namespaced_config_map(
        "py",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"cm-{i}", labels={"parity": "even" if i % 2 == 0 else "odd"}),
            data={"i": str(i)},
        ),
    )

results["even"] = sorted(c.metadata.name for c in core.list_namespaced_config_map("py", label_selector="parity=even").items)
results["by_name"] = [c.metadata.name for c in core.list_namespaced_config_map("py", field_selector="metadata.name=cm-3").items]

# Pagination.
names, token = [], None
while True:
    page = core.list_namespaced_config_map("py", limit=2, _continue=token)
    names += [c.metadata.name for c in page.items]
    token = page.metadata._continue
    if not token:
        break
results["paged"] = names

# Watch resumed from a resourceVersion: only what happened after it.
rv = core.list_namespaced_config_map("py").metadata.resource_version
core.delete_namespaced_config_map("cm-0", "py")
core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-late")))
events = []
for event in watch.Watch().stream(core.list_namespaced_config_map, "py", resource_version=rv, timeout_seconds=5):
    events.append([event["type"], event["object"].metadata.name])
    if len(events) == 2:
        break
results["watch"] = events

# JSON patch and merge patch, with explicit content types (a dict alone is a strategic merge patch).
core.patch_namespaced_config_map(
    "cm-1", "py", [{"op": "add", "path": "/data/j", "value": "json"}], _content_type="application/json-patch+json"
)
core.patch_namespaced_config_map(
    "cm-1", "py", {"data": {"m": "merge"}}, _content_type="application/merge-patch+json"
)
results["patched"] = core.read_namespaced_config_map("cm-1", "py").data
# A dict alone is sent as a strategic merge patch: a pod's containers merge by name.
core.create_namespaced_pod("py", client.V1Pod(
    metadata=client.V1ObjectMeta(name="pod-1"),
    spec=client.V1PodSpec(containers=[client.V1Container(name="a", image="busybox:1")]),
))
core.patch_namespaced_pod("pod-1", "py", {"metadata": {"labels": {"p": "s"}}, "spec": {"containers": [{"name": "a", "image": "busybox:2"}]}})
patched_pod = core.read_namespaced_pod("pod-1", "py")
results["strategic"] = [patched_pod.metadata.labels, [[c.name, c.image] for c in patched_pod.spec.containers]]

# Errors as the client raises them.
try:
    core.read_namespaced_config_map("missing", "py")
except client.ApiException as error:
    results["missing"] = [error.status, json.loads(error.body)["reason"]]
try:
    core.create_namespaced_config_map("py", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-1")))
except client.ApiException as error:
    results["duplicate"] = [error.status, json.loads(error.body)["reason"]]

print(json.dumps(results))
