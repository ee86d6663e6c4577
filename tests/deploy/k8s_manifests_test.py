"""The Kubernetes manifests in deploy/k8s, checked offline: no cluster, no network.

What `kubectl apply -k deploy/k8s` (workers register with the routers) and `kubectl apply -k
deploy/k8s-discovery` (the routers find the workers through the API's EndpointSlices) would send
is built twice: by a small renderer here that does exactly what the kustomization.yaml files ask
(bases, labels, the ConfigMap generator, images, JSON patches; a kustomization field it does not
know fails the test), and by `kubectl kustomize` where kubectl is installed (skipped where not).
Both renderings must agree, and each must pass:

  * the Kubernetes JSON schemas (strict: unknown fields fail) bundled by the PyPI package
    kubernetes-validate, for the oldest Kubernetes these manifests claim and the newest it has;
  * the Pod Security Standard "restricted" (with "baseline" under it), checked here rule by rule
    for every pod template; a negative test breaks each rule once and expects it to be caught;
  * this deployment's own rules: read-only root filesystems as the image's non-root user,
    PodDisruptionBudgets for the prefill and decode workers, startup probes generous enough for
    model loading, the recommended app.kubernetes.io labels on every object and pod template,
    selectors on the stable subset (name, instance, component) that match their pods, the model
    volume mounted read-only, and every reference to a ConfigMap, PVC, Secret or ServiceAccount
    resolvable; a pod that mounts a service account token may only read EndpointSlices, and the
    Services that workers or routers name by address spec exist with the named port.

deploy_manifests_test.cc checks the container flags and ports against the `baton` binary.
"""

import copy
import os
import pathlib
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

ROOT = pathlib.Path(os.environ.get("BATON_SOURCE_DIR")
                    or pathlib.Path(__file__).resolve().parents[2])
K8S = ROOT / "deploy" / "k8s"
DISCOVERY = ROOT / "deploy" / "k8s-discovery"
KUSTOMIZATIONS = {"register": K8S, "discovery": DISCOVERY}
DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"

# The oldest Kubernetes the manifests claim (README.md: gRPC probes GA in 1.27, PDB
# unhealthyPodEvictionPolicy GA in 1.31) and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.31", kubernetes_validate.latest_version())

# Objects the manifests use but do not create: the operator does (README.md).
EXTERNAL = {("Secret", "baton-token")}

RECOMMENDED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)
# Selectors use only these: the others (version above all) change between releases, and a
# Deployment's selector is immutable.
SELECTOR_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/component"}
COMPONENTS = {"router", "prefill", "decode", "model"}
WORKERS = ("prefill", "decode")
MIN_STARTUP_BUDGET_S = 300  # model loading from a network volume: 5 minutes before liveness
MODEL_MOUNT = "/models"

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "labels", "resources", "configMapGenerator",
                        "images", "patches"}
JSON_PATCH_OPS = {"add", "remove", "replace", "test"}


# --- loading and rendering ---------------------------------------------------------------------

def manifest_files(directory=K8S):
    return sorted(p for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")


def load_kustomization(directory=K8S):
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def load_file(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def json_patch(document, operations):
    """RFC 6902 operations (add, remove, replace, test) applied to `document` in place."""
    for op in operations:
        assert op["op"] in JSON_PATCH_OPS, op
        *parents, last = [part.replace("~1", "/").replace("~0", "~")
                          for part in op["path"].split("/")[1:]]
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key = last if isinstance(node, dict) else (len(node) if last == "-" else int(last))
        if op["op"] == "test":
            assert node[key] == op["value"], f"patch test failed at {op['path']}: {node[key]!r}"
        elif op["op"] == "remove":
            del node[key]
        elif op["op"] == "add" and isinstance(node, list):
            node.insert(key, op["value"])
        else:
            assert op["op"] == "add" or key in node, f"replace of a missing {op['path']}"
            node[key] = op["value"]


def render_here(directory=K8S):
    """A kustomization.yaml applied by hand: the fields it uses, as kustomize defines them."""
    k = load_kustomization(directory)
    unknown = set(k) - KUSTOMIZATION_FIELDS
    assert not unknown, f"kustomization.yaml uses {sorted(unknown)}: teach render_here() them"
    objects = []
    for generator in k.get("configMapGenerator", []):
        assert set(generator) <= {"name", "literals", "options"}, generator
        assert set(generator.get("options", {})) <= {"labels"}, generator
        data = dict(literal.split("=", 1) for literal in generator.get("literals") or [])
        config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": generator["name"]}}
        if generator.get("options", {}).get("labels"):
            config_map["metadata"]["labels"] = dict(generator["options"]["labels"])
        if data:
            config_map["data"] = data
        objects.append(config_map)
    for resource in k["resources"]:
        path = (directory / resource).resolve()
        objects.extend(render_here(path) if path.is_dir() else load_file(path))
    for patch in k.get("patches", []):
        assert set(patch) == {"target", "patch"} and set(patch["target"]) <= {"kind", "name"}, patch
        target = patch["target"]
        targets = [obj for obj in objects
                   if obj["kind"] == target.get("kind", obj["kind"])
                   and obj["metadata"]["name"] == target.get("name", obj["metadata"]["name"])]
        assert len(targets) == 1, f"patch target {patch['target']}: {len(targets)} objects"
        json_patch(targets[0], yaml.safe_load(patch["patch"]))
    for entry in k.get("labels", []):
        assert set(entry) <= {"pairs", "includeSelectors", "includeTemplates"}, entry
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(entry["pairs"])
            template = None
            if obj["kind"] in WORKLOAD_KINDS:
                template = obj["spec"].get("template")
            if template is not None and (entry.get("includeTemplates")
                                         or entry.get("includeSelectors")):
                template.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])
            if entry.get("includeSelectors"):
                selector = selector_of(obj)
                if selector is not None:
                    selector.update(entry["pairs"])
    images = {image["name"]: image for image in k.get("images", [])}
    for obj in objects:
        for container in containers_of(obj):
            image = images.get(container["image"].split(":")[0])
            if image is not None:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return objects


def render_kubectl(directory=K8S):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: only this test's own rendering is checked")
    out = subprocess.run([kubectl, "kustomize", str(directory)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc is not None]


@pytest.fixture(scope="module", params=[(renderer, kustomization)
                                        for renderer in ("render_here", "kubectl_kustomize")
                                        for kustomization in KUSTOMIZATIONS],
                ids=lambda param: "-".join(param))
def objects(request):
    renderer, kustomization = request.param
    directory = KUSTOMIZATIONS[kustomization]
    return render_here(directory) if renderer == "render_here" else render_kubectl(directory)


# --- helpers -----------------------------------------------------------------------------------

def name_of(obj):
    return f"{obj['kind']}/{obj['metadata']['name']}"


def pod_spec_of(obj):
    if obj["kind"] == "Pod":
        return obj["spec"]
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def pod_metadata_of(obj):
    if obj["kind"] == "Pod":
        return obj["metadata"]
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"].get("metadata", {})
    return None


def containers_of(obj):
    spec = pod_spec_of(obj)
    if spec is None:
        return []
    return [*spec.get("initContainers", []), *spec.get("containers", []),
            *spec.get("ephemeralContainers", [])]


def selector_of(obj):
    """The label selector to match (a dict), or None."""
    if obj["kind"] in WORKLOAD_KINDS or obj["kind"] == "PodDisruptionBudget":
        return obj["spec"].get("selector", {}).get("matchLabels")
    if obj["kind"] == "Service":
        return obj["spec"].get("selector")
    return None


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def component(obj):
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def deployments(objects):
    return [obj for obj in objects if obj["kind"] == "Deployment"]


def image_user():
    """The numeric uid of the image's USER line."""
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert users and users[-1].isdigit(), f"{DOCKERFILE}: USER must be a numeric uid"
    return int(users[-1])


# --- Pod Security Standards --------------------------------------------------------------------
# https://kubernetes.io/docs/concepts/security/pod-security-standards/ : "restricted" is
# "baseline" plus the restricted controls. Each function returns a list of violations.

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
RESTRICTED_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"}


def pod_security_violations(spec, metadata):
    """Every Pod Security "restricted" (and so "baseline") rule the pod breaks, as strings."""
    v = []
    psc = spec.get("securityContext") or {}
    containers = [*spec.get("initContainers", []), *spec.get("containers", []),
                  *spec.get("ephemeralContainers", [])]

    # Baseline.
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            v.append(f"{field}: true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        v.append("pod: windowsOptions.hostProcess")
    for vol in spec.get("volumes", []):
        if "hostPath" in vol:
            v.append(f"volume {vol['name']}: hostPath")
    if (psc.get("seccompProfile") or {}).get("type") == "Unconfined":
        v.append("pod: seccompProfile Unconfined")
    if (psc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        v.append("pod: appArmorProfile not RuntimeDefault/Localhost")
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            v.append(f"annotation {key}: {value}")
    for sysctl in psc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            v.append(f"pod: unsafe sysctl {sysctl['name']}")

    def selinux(where, options):
        if options is None:
            return
        if options.get("type", "") not in SELINUX_TYPES:
            v.append(f"{where}: seLinuxOptions.type {options['type']}")
        if options.get("user") or options.get("role"):
            v.append(f"{where}: seLinuxOptions.user/role set")

    selinux("pod", psc.get("seLinuxOptions"))

    # Restricted, pod level.
    for vol in spec.get("volumes", []):
        types = set(vol) - {"name"}
        if not types <= RESTRICTED_VOLUME_TYPES:
            v.append(f"volume {vol['name']}: type {sorted(types)} not allowed")
    if psc.get("runAsUser") == 0:
        v.append("pod: runAsUser 0")
    pod_non_root = psc.get("runAsNonRoot") is True
    if psc.get("runAsNonRoot") is False:
        v.append("pod: runAsNonRoot false")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        v.append(f"pod: seccompProfile {pod_seccomp}")

    for c in containers:
        where = f"container {c['name']}"
        sc = c.get("securityContext") or {}
        # Baseline.
        if sc.get("privileged"):
            v.append(f"{where}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            v.append(f"{where}: windowsOptions.hostProcess")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                v.append(f"{where}: hostPort {port['hostPort']}")
        if sc.get("procMount", "Default") != "Default":
            v.append(f"{where}: procMount {sc['procMount']}")
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault",
                                                                 "Localhost"):
            v.append(f"{where}: appArmorProfile not RuntimeDefault/Localhost")
        selinux(where, sc.get("seLinuxOptions"))
        caps = sc.get("capabilities") or {}
        for cap in caps.get("add", []):
            if cap not in BASELINE_CAPABILITIES:
                v.append(f"{where}: adds capability {cap} (baseline)")
        # Restricted.
        if sc.get("allowPrivilegeEscalation") is not False:
            v.append(f"{where}: allowPrivilegeEscalation must be false")
        if sc.get("runAsNonRoot") is False or not (pod_non_root or sc.get("runAsNonRoot") is True):
            v.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            v.append(f"{where}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
            v.append(f"{where}: seccompProfile {seccomp}")
        if seccomp is None and pod_seccomp is None:
            v.append(f"{where}: no seccompProfile RuntimeDefault/Localhost (pod or container)")
        if "ALL" not in caps.get("drop", []):
            v.append(f"{where}: capabilities must drop ALL")
        for cap in caps.get("add", []):
            if cap not in RESTRICTED_CAPABILITIES:
                v.append(f"{where}: adds capability {cap} (restricted: NET_BIND_SERVICE only)")
    return v


# --- the tests ---------------------------------------------------------------------------------

def test_every_yaml_document_parses():
    for path in [*manifest_files(), K8S / "kustomization.yaml", *manifest_files(DISCOVERY),
                 DISCOVERY / "kustomization.yaml"]:
        docs = load_file(path)
        assert docs, f"{path.name}: no YAML document"
        for doc in docs:
            assert isinstance(doc, dict), f"{path.name}: a document that is not a mapping"
            for field in ("apiVersion", "kind"):
                assert doc.get(field), f"{path.name}: a document without {field}"
            if path.name != "kustomization.yaml":
                assert doc.get("metadata", {}).get("name"), f"{path.name}: an object without a name"


def test_kustomization_lists_every_manifest():
    listed = load_kustomization()["resources"]
    assert len(listed) == len(set(listed)), "a resource listed twice"
    assert sorted(listed) == [p.name for p in manifest_files()], (
        "kustomization.yaml's resources must be exactly the other *.yaml files here")
    listed = load_kustomization(DISCOVERY)["resources"]
    assert sorted(listed) == sorted(["../k8s", *(p.name for p in manifest_files(DISCOVERY))]), (
        "k8s-discovery/kustomization.yaml's resources must be the base and the *.yaml files there")


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_both_renderings_agree(kustomization):
    """render_here() is a faithful kustomize for these manifests (kubectl's only adds the
    ConfigMap generator's hash suffix)."""
    ours = render_here(KUSTOMIZATIONS[kustomization])
    theirs = render_kubectl(KUSTOMIZATIONS[kustomization])
    generated = {g["name"] for g in load_kustomization().get("configMapGenerator", [])}

    def unhash(node):
        if isinstance(node, dict):
            return {k: unhash(val) for k, val in node.items()}
        if isinstance(node, list):
            return [unhash(val) for val in node]
        if isinstance(node, str):
            for name in generated:
                if re.fullmatch(re.escape(name) + r"-[a-z0-9]{10}", node):
                    return name
        return node

    key = lambda obj: name_of(obj)
    assert sorted((unhash(o) for o in theirs), key=key) == sorted(ours, key=key)


def test_objects_pass_the_kubernetes_schemas(objects):
    for version in KUBERNETES_VERSIONS:
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                pytest.fail(f"{name_of(obj)} against Kubernetes {version}: {path}: {e.message}")


def test_every_pod_template_is_pod_security_restricted(objects):
    pods = [obj for obj in objects if pod_spec_of(obj) is not None]
    assert len(pods) == 3, "router, prefill and decode"
    for obj in pods:
        assert pod_security_violations(pod_spec_of(obj), pod_metadata_of(obj)) == [], name_of(obj)


# Each rule broken once in a real pod template: the checker above must catch every one.
BREAKAGES = {
    "hostNetwork": lambda s: s.update(hostNetwork=True),
    "hostPID": lambda s: s.update(hostPID=True),
    "hostIPC": lambda s: s.update(hostIPC=True),
    "hostPath": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "nfs volume": lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
    "pod runAsUser 0": lambda s: s["securityContext"].update(runAsUser=0),
    "runAsNonRoot unset": lambda s: [s["securityContext"].pop("runAsNonRoot"),
                                     s["containers"][0]["securityContext"].pop("runAsNonRoot")],
    "pod seccomp unset": lambda s: s["securityContext"].pop("seccompProfile"),
    "pod seccomp Unconfined": lambda s: s["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "unsafe sysctl": lambda s: s["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "privileged": lambda s: s["containers"][0]["securityContext"].update(privileged=True),
    "allowPrivilegeEscalation unset": lambda s: s["containers"][0]["securityContext"].pop(
        "allowPrivilegeEscalation"),
    "container runAsNonRoot false": lambda s: s["containers"][0]["securityContext"].update(
        runAsNonRoot=False),
    "container runAsUser 0": lambda s: s["containers"][0]["securityContext"].update(runAsUser=0),
    "container seccomp Unconfined": lambda s: s["containers"][0]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "drop ALL missing": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
        drop=[]),
    "adds SYS_ADMIN": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]),
    "adds CHOWN": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
        add=["CHOWN"]),
    "hostPort": lambda s: s["containers"][0]["ports"][0].update(hostPort=7000),
    "procMount": lambda s: s["containers"][0]["securityContext"].update(procMount="Unmasked"),
    "seLinux type": lambda s: s["containers"][0]["securityContext"].update(
        seLinuxOptions={"type": "spc_t"}),
    "appArmor": lambda s: s["containers"][0]["securityContext"].update(
        appArmorProfile={"type": "Unconfined"}),
    "hostProcess": lambda s: s["containers"][0]["securityContext"].update(
        windowsOptions={"hostProcess": True}),
    "insecure init container": lambda s: s.setdefault("initContainers", []).append(
        {"name": "init", "image": "x"}),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_pod_security_check_catches(breakage):
    for obj in deployments(render_here()):
        spec = copy.deepcopy(pod_spec_of(obj))
        BREAKAGES[breakage](spec)
        assert pod_security_violations(spec, pod_metadata_of(obj)), f"{name_of(obj)}: {breakage}"


def test_containers_run_read_only_as_the_image_user(objects):
    uid = image_user()
    assert uid != 0
    for obj in objects:
        spec = pod_spec_of(obj)
        if spec is None:
            continue
        if spec.get("automountServiceAccountToken") is not False:
            assert_reads_only_endpoint_slices(objects, obj)
        for c in containers_of(obj):
            sc = c.get("securityContext") or {}
            assert sc.get("readOnlyRootFilesystem") is True, f"{name_of(obj)} {c['name']}"
            run_as = sc.get("runAsUser", (spec.get("securityContext") or {}).get("runAsUser"))
            assert run_as == uid, (f"{name_of(obj)} {c['name']}: runAsUser {run_as}, the image's "
                                   f"USER is {uid}")


def assert_reads_only_endpoint_slices(objects, obj):
    """`obj`'s pods mount a service account token: every Role bound to that account grants no
    more than reading EndpointSlices (what k8s: address specs do, rpc/kubernetes_endpoints.h)."""
    spec = pod_spec_of(obj)
    account = spec.get("serviceAccountName")
    assert account and account != "default", (
        f"{name_of(obj)}: a token of the default service account is mounted")
    bindings = [b for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and any(s["kind"] == "ServiceAccount" and s["name"] == account
                        for s in b.get("subjects", []))]
    assert bindings, f"{name_of(obj)}: service account {account} is bound to nothing"
    for binding in bindings:
        assert binding["kind"] == "RoleBinding", f"{name_of(binding)}: cluster-wide"
        [role] = [r for r in objects if r["kind"] == binding["roleRef"]["kind"]
                  and r["metadata"]["name"] == binding["roleRef"]["name"]]
        for rule in role["rules"]:
            assert rule == {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                            "verbs": ["get", "list", "watch"]}, f"{name_of(role)}: {rule}"


def address_specs(objects, flag):
    """(Deployment, spec) for every container argument --FLAG=SPEC."""
    return [(obj, arg.split("=", 1)[1]) for obj in deployments(objects)
            for c in containers_of(obj) for arg in c.get("args", [])
            if arg.startswith(f"--{flag}=")]


def test_workers_are_found_one_way(objects):
    """Workers either register (--router on each worker) or are found by the routers (k8s: specs
    on the router), never both: a drained worker must not come back by registering."""
    registering = address_specs(objects, "router")
    found = address_specs(objects, "prefill") + address_specs(objects, "decode")
    assert bool(registering) != bool(found), (registering, found)
    workers = [d for d in deployments(objects) if component(d) in WORKERS]
    if registering:
        assert {component(d) for d, _ in registering} == set(WORKERS)
        return
    assert {spec.split(":")[0] for _, spec in found} == {"k8s"}
    for role in WORKERS:
        for _, spec in address_specs(objects, role):
            _, service, port = spec.split(":")
            [svc] = [s for s in objects
                     if s["kind"] == "Service" and s["metadata"]["name"] == service]
            assert port in {p["name"] for p in svc["spec"]["ports"]}, f"{service}: no port {port}"
            [selected] = [d for d in workers if matches(
                svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
            assert component(selected) == role, f"--{role}={spec} selects {name_of(selected)}"


def test_worker_disruption_budgets(objects):
    budgets = [obj for obj in objects if obj["kind"] == "PodDisruptionBudget"]
    for role in WORKERS:
        [deployment] = [d for d in deployments(objects) if component(d) == role]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if matches(b["spec"]["selector"]["matchLabels"], pod_labels)]
        assert len(covering) == 1, f"{role}: {len(covering)} PodDisruptionBudgets select its pods"
        spec = covering[0]["spec"]
        # Neither minAvailable equal to the replicas nor maxUnavailable 0: a drain must finish.
        assert "maxUnavailable" in spec or spec["minAvailable"] < deployment["spec"]["replicas"], (
            f"{role}: with {deployment['spec']['replicas']} replica(s) this budget blocks drains")
        assert spec.get("maxUnavailable", 1) != 0, role
        for other in deployments(objects):
            if other is not deployment:
                assert not matches(spec["selector"]["matchLabels"],
                                   other["spec"]["template"]["metadata"]["labels"]), (
                    f"{name_of(covering[0])} also selects {name_of(other)}'s pods")


def test_startup_probes_allow_for_model_loading(objects):
    for obj in deployments(objects):
        if component(obj) not in (*WORKERS, "router"):
            continue
        for c in obj["spec"]["template"]["spec"]["containers"]:
            grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
            probe = c.get("startupProbe")
            assert probe is not None, f"{name_of(obj)}: no startupProbe (liveness would kill a " \
                                      "worker still loading its model)"
            assert probe.get("grpc", {}).get("port") == grpc_port, f"{name_of(obj)}: {probe}"
            budget = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
            assert budget >= MIN_STARTUP_BUDGET_S, f"{name_of(obj)}: startup budget {budget} s"
            assert c.get("livenessProbe") and c.get("readinessProbe"), name_of(obj)


def test_recommended_labels_everywhere(objects):
    version = next(i["newTag"] for i in load_kustomization()["images"] if i["name"] == "baton")
    carriers = [(name_of(obj), obj["metadata"].get("labels") or {}) for obj in objects]
    carriers += [(f"{name_of(obj)} pod template", pod_metadata_of(obj).get("labels") or {})
                 for obj in objects if pod_metadata_of(obj) is not None and obj["kind"] != "Pod"]
    for where, labels in carriers:
        missing = [label for label in RECOMMENDED_LABELS if not labels.get(label)]
        assert not missing, f"{where}: missing {missing}"
        assert labels["app.kubernetes.io/name"] == "baton", where
        assert labels["app.kubernetes.io/part-of"] == "baton", where
        assert labels["app.kubernetes.io/managed-by"] == "kustomize", where
        assert labels["app.kubernetes.io/component"] in COMPONENTS, where
        assert labels["app.kubernetes.io/version"] == str(version), (
            f"{where}: version label {labels['app.kubernetes.io/version']}, image tag {version}")


def test_selectors_are_stable_and_match_their_pods(objects):
    pods = {name_of(d): d["spec"]["template"]["metadata"]["labels"] for d in deployments(objects)}
    assert {component(d) for d in deployments(objects)} == {"router", *WORKERS}
    for obj in objects:
        selector = selector_of(obj)
        if selector is None:
            continue
        assert set(selector) == SELECTOR_LABELS, f"{name_of(obj)}: selector {selector}"
        if obj["kind"] == "Deployment":
            assert matches(selector, pods[name_of(obj)]), f"{name_of(obj)}: selector {selector}"
            assert selector["app.kubernetes.io/component"] == component(obj), name_of(obj)
        else:
            selected = [name for name, labels in pods.items() if matches(selector, labels)]
            assert len(selected) == 1, f"{name_of(obj)} selects {selected}"


def test_references_resolve_and_the_model_volume_is_read_only(objects):
    defined = {(obj["kind"], obj["metadata"]["name"]) for obj in objects} | EXTERNAL
    for obj in objects:
        spec = pod_spec_of(obj)
        if spec is None:
            continue
        volumes = {vol["name"]: vol for vol in spec.get("volumes", [])}
        for vol in volumes.values():
            if "persistentVolumeClaim" in vol:
                claim = ("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
                assert claim in defined, f"{name_of(obj)}: no {claim}"
            if "secret" in vol:
                assert ("Secret", vol["secret"]["secretName"]) in defined, name_of(obj)
            if "configMap" in vol:
                assert ("ConfigMap", vol["configMap"]["name"]) in defined, name_of(obj)
        if spec.get("serviceAccountName"):
            assert ("ServiceAccount", spec["serviceAccountName"]) in defined, name_of(obj)
        for c in containers_of(obj):
            for env in c.get("env", []):
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref is not None:
                    assert ("ConfigMap", ref["name"]) in defined, f"{name_of(obj)}: {ref}"
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            for m in mounts.values():
                assert m["name"] in volumes, f"{name_of(obj)}: mount of undeclared {m['name']}"
            model = mounts.get(MODEL_MOUNT)
            assert model is not None, f"{name_of(obj)} {c['name']}: nothing at {MODEL_MOUNT}"
            assert model.get("readOnly") is True, f"{name_of(obj)}: {MODEL_MOUNT} must be read-only"
            claim = volumes[model["name"]].get("persistentVolumeClaim")
            assert claim and claim.get("readOnly") is True, (
                f"{name_of(obj)}: {volumes[model['name']]}")
            assert "/tmp" in mounts, f"{name_of(obj)}: no writable /tmp on the read-only root"
            # The model the pod serves: BATON_MODEL, --model's default, from the generated
            # ConfigMap; optional, so without it the image's own BATON_MODEL applies.
            [model_env] = [e for e in c.get("env", []) if e["name"] == "BATON_MODEL"]
            ref = model_env["valueFrom"]["configMapKeyRef"]
            assert ref.get("optional") is True, f"{name_of(obj)}: BATON_MODEL must fall back"
            assert not any(a.startswith("--model") for a in c.get("args", [])), (
                f"{name_of(obj)}: --model would override BATON_MODEL and its fallback")


def test_configured_model_lives_on_the_model_volume(objects):
    for obj in objects:
        if obj["kind"] == "ConfigMap" and "BATON_MODEL" in (obj.get("data") or {}):
            path = obj["data"]["BATON_MODEL"]
            assert path.startswith(MODEL_MOUNT + "/") or path.startswith("/opt/baton/"), (
                f"{name_of(obj)}: BATON_MODEL {path}: neither on the model volume nor in the image")
