#!/usr/bin/env python3
"""Turns deploy/k8s into what `podman kube play` (Debian 12's podman 4.3) runs, for
scripts/container_test.sh. Prints the YAML of one component's objects.

What it changes, and why:
  - the image: `baton` becomes --image (kustomization.yaml's `images:` does this on Kubernetes);
  - Services and the PodDisruptionBudget are left out: podman has neither. The one thing the pods
    need from a Service, the headless baton-router-workers name resolving to every router pod, is
    given to the workers as hostAliases (--router-ip, once per router pod);
  - container ports are left out: podman publishes them on the host, where two router replicas
    would clash; every pod has its own address on podman's network, as on Kubernetes;
  - secret volumes say `optional: false`: podman 4.3 crashes on a secret volume without it;
  - an env var from the pod's own address (fieldRef status.podIP, which podman does not give) gets
    the address the pod is played with (--pod-ip, with `podman kube play --ip`; one replica);
  - `$(VAR)` in args is expanded from the container's env values, as Kubernetes does (podman 4.3
    passes it as written).
Everything else (replicas, args, env, the security context, volumes) is played as written.

Usage: podman_kube.py MANIFEST --image IMAGE [--router-ip IP ...] [--pod-ip IP]
"""
import argparse
import sys

import yaml

ROUTER_WORKERS_SERVICE = "baton-router-workers"
PLAYED_KINDS = {"Deployment", "PersistentVolumeClaim", "ConfigMap"}


def expand(arg, values):
    """arg with each $(NAME) of values replaced, as Kubernetes expands container args."""
    for name, value in values.items():
        arg = arg.replace(f"$({name})", value)
    return arg


def adapt_pod(spec, image, router_ips, pod_ip):
    for container in spec.get("containers", []):
        if container.get("image") == "baton":
            container["image"] = image
        container.pop("ports", None)
        for env in container.get("env", []):
            field = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if field == "status.podIP":
                if not pod_ip:
                    sys.exit(f"{env['name']} is the pod's address: give it as --pod-ip")
                env.pop("valueFrom")
                env["value"] = pod_ip
        values = {env["name"]: env["value"] for env in container.get("env", []) if "value" in env}
        container["args"] = [expand(arg, values) for arg in container.get("args", [])]
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            volume["secret"]["optional"] = False
    if router_ips:
        spec["hostAliases"] = [{"ip": ip, "hostnames": [ROUTER_WORKERS_SERVICE]}
                               for ip in router_ips]


def adapt(documents, image, router_ips, pod_ip):
    played = []
    for doc in documents:
        if not doc or doc.get("kind") not in PLAYED_KINDS:
            continue
        if doc["kind"] == "Deployment":
            if pod_ip and doc["spec"].get("replicas", 1) != 1:
                sys.exit(f"--pod-ip gives one address; {doc['metadata']['name']} has replicas")
            adapt_pod(doc["spec"]["template"]["spec"], image, router_ips, pod_ip)
        played.append(doc)
    return played


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest")
    parser.add_argument("--image", required=True)
    parser.add_argument("--router-ip", action="append", default=[])
    parser.add_argument("--pod-ip")
    args = parser.parse_args()
    with open(args.manifest) as f:
        documents = list(yaml.safe_load_all(f))
    yaml.safe_dump_all(adapt(documents, args.image, args.router_ip, args.pod_ip), sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
