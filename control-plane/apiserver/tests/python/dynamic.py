"""The Python kubernetes client's dynamic client and utils.create_from_yaml against keel-apiserver;
prints one JSON line of results.

Usage: dynamic.py KUBECONFIG MANIFEST
"""
import json
import sys

from kubernetes import client, config, dynamic, utils
from kubernetes.dynamic.exceptions import NotFoundError

config.load_kube_config(config_file=sys.argv[1])
api = client.ApiClient()
results = {}

# create_from_yaml: a multi-document manifest, each document created through its typed API.
created = utils.create_from_yaml(api, sys.argv[2])
results["created"] = sorted(f"{o.kind}/{o.metadata.name}" for group in created for o in group)

# The dynamic client finds resources through discovery, by apiVersion and kind.
dyn = dynamic.DynamicClient(api)
deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
results["deployment_namespaced"] = deployments.namespaced
results["listed"] = [d.metadata.name for d in deployments.get(namespace="dyn").items]
web = deployments.get(name="web", namespace="dyn")
results["replicas"] = web.spec.replicas
patched = deployments.patch(
    name="web",
    namespace="dyn",
    body={"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "busybox:2"}]}}}},
    content_type="application/strategic-merge-patch+json",
)
results["patched"] = [(c.name, c.image) for c in patched.spec.template.spec.containers]
config_maps = dyn.resources.get(api_version="v1", kind="ConfigMap")
config_maps.create(body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made"}, "data": {"a": "1"}}, namespace="dyn")
replaced = config_maps.replace(
    body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "resourceVersion": config_maps.get(name="made", namespace="dyn").metadata.resourceVersion}, "data": {"a": "2"}},
    namespace="dyn",
)
results["replaced"] = dict(replaced.data)
config_maps.delete(name="made", namespace="dyn")
try:
    config_maps.get(name="made", namespace="dyn")
    results["deleted"] = "still there"
except NotFoundError as err:
    results["deleted"] = err.status
services = dyn.resources.get(api_version="v1", kind="Service")
results["service_ports"] = [p.port for p in services.get(name="web", namespace="dyn").spec.ports]

print(json.dumps(results))
