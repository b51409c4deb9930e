"""Drives a custom resource through the official Python kubernetes client's dynamic client; prints
one JSON line of results.

Usage: crd.py KUBECONFIG
"""
import json
import sys

from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
dyn = dynamic.DynamicClient(client.ApiClient())
widgets = dyn.resources.get(api_version="test.keel.dev/v1", kind="Widget")
results = {"namespaced": widgets.namespaced, "short_names": widgets.short_names}

body = {
    "apiVersion": "test.keel.dev/v1",
    "kind": "Widget",
    "metadata": {"name": "py-widget", "labels": {"from": "python"}},
    "spec": {"size": 2, "color": "blue", "name": "py", "unknown": "pruned"},
}
created = widgets.create(body=body, namespace="default")
results["created"] = [created.spec.size, created.spec.color, created.spec.replicas, "unknown" in created.spec]
got = widgets.get(name="py-widget", namespace="default")
results["got"] = got.metadata.name
patched = widgets.patch(
    name="py-widget",
    namespace="default",
    body={"spec": {"size": 5}},
    content_type="application/merge-patch+json",
)
results["patched"] = patched.spec.size
listed = widgets.get(namespace="default", label_selector="from=python")
results["listed"] = [w.metadata.name for w in listed.items]
try:
    widgets.patch(name="py-widget", namespace="default", body={"spec": {"color": "pink"}},
                  content_type="application/merge-patch+json")
except ApiException as e:
    detail = json.loads(e.body)
    results["invalid"] = [e.status, detail["reason"], [c["field"] for c in detail["details"]["causes"]]]
widgets.delete(name="py-widget", namespace="default")
try:
    widgets.get(name="py-widget", namespace="default")
except ApiException as e:
    results["deleted"] = e.status
print(json.dumps(results))
