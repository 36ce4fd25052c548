#!/usr/bin/env bash
# Validates deploy/k8s offline: every resource kustomization.yaml lists (and no other
# manifest may exist) against the pinned Kubernetes schema, strictly (unknown fields and
# unknown kinds fail), then the cross-references a schema cannot see: selectors, ports,
# probes (and that README describes them as they are), Secret and ConfigMap names, the
# grace period against the drain timings, a PodDisruptionBudget that lets a node drain
# evict the pod, and every CURSOR_RUNNER_* name against the ones the binary reads. Exits
# non-zero on failure.
#
# Needs python3; installs the PyPI package kubernetes-validate (pinned) if it is missing.
# No cluster: `kubectl --dry-run=client` would need one.
set -euo pipefail
cd "$(dirname "$0")"

KUBERNETES_VALIDATE_VERSION=1.37.0 # the PyPI package, which bundles the schemas
KUBERNETES_VERSION=1.33.0          # the schema the manifests are held to

installed=$(python3 -c 'import kubernetes_validate; print(kubernetes_validate.__version__)' 2>/dev/null || true)
if [ "$installed" != "$KUBERNETES_VALIDATE_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

KUBERNETES_VERSION=$KUBERNETES_VERSION python3 - <<'PYTHON'
import glob
import os
import re
import sys

import kubernetes_validate
import yaml

version = os.environ["KUBERNETES_VERSION"]
failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL {message}")


kustomization = yaml.safe_load(open("kustomization.yaml"))
if kustomization.get("kind") != "Kustomization":
    fail("kustomization.yaml: not a Kustomization")
listed = kustomization.get("resources", [])
present = sorted(f for f in glob.glob("*.yaml") if f != "kustomization.yaml")
for name in sorted(set(present) - set(listed)):
    fail(f"{name}: not listed in kustomization.yaml (it would never be applied)")
for name in sorted(set(listed) - set(present)):
    fail(f"kustomization.yaml lists {name}, which does not exist")

resources = {}
for name in listed:
    if not os.path.exists(name):
        continue
    for resource in (r for r in yaml.safe_load_all(open(name)) if r):
        label = f"{name}: {resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(resource, version, strict=True)
            print(f"ok   {label} (Kubernetes {version}, strict)")
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            fail(f"{label}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            fail(f"{label}: {e.message}")
        resources[(resource["kind"], resource["metadata"]["name"])] = resource

if failures:
    sys.exit(f"{len(failures)} failure(s)")


def one(kind):
    found = [r for (k, _), r in resources.items() if k == kind]
    if len(found) != 1:
        fail(f"expected exactly one {kind}, found {len(found)}")
        return {}
    return found[0]


deployment = one("Deployment")
service = one("Service")
budget = one("PodDisruptionBudget")
pod = deployment["spec"]["template"]
labels = pod["metadata"].get("labels", {})
spec = pod["spec"]
container = spec["containers"][0]

# Selectors select the pod.
for what, selector in [
    ("Deployment selector", deployment["spec"]["selector"]["matchLabels"]),
    ("Service selector", service["spec"]["selector"]),
    ("PodDisruptionBudget selector", budget["spec"]["selector"]["matchLabels"]),
]:
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        fail(f"{what} {selector} does not match the pod's labels {labels}")

# Several replicas on one database, rolled a new pod first (see deployment.yaml).
replicas = deployment["spec"].get("replicas", 1)
strategy = deployment["spec"].get("strategy", {})
if replicas < 2:
    fail(f"the Deployment runs {replicas} replica(s): a fleet needs at least 2")
if strategy.get("type") != "RollingUpdate" or strategy.get("rollingUpdate", {}).get("maxUnavailable") != 0:
    fail("the Deployment must roll with RollingUpdate and maxUnavailable: 0 (a new pod before an old one drains)")

# The budget must allow one eviction at the replica count: a budget that allows none
# (minAvailable: 1 with one replica) blocks every node drain (`kubectl drain` retries the
# eviction forever). An eviction is a SIGTERM, i.e. a graceful drain of the pod.
def budget_count(value, total, round_up):
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total
        return -(-share // 100) if round_up else share // 100
    return int(value)


budget_spec = budget["spec"]
if "minAvailable" in budget_spec:
    allowed = replicas - budget_count(budget_spec["minAvailable"], replicas, True)
elif "maxUnavailable" in budget_spec:
    allowed = budget_count(budget_spec["maxUnavailable"], replicas, True)
else:
    allowed = replicas
if allowed < 1:
    fail(f"the PodDisruptionBudget allows {allowed} eviction(s) with {replicas} replica(s): it blocks every node drain")

# ConfigMap, Secrets.
config = {}
for source in container.get("envFrom", []):
    name = source["configMapRef"]["name"]
    if ("ConfigMap", name) not in resources:
        fail(f"envFrom names ConfigMap {name}, which is not in the kustomization")
    else:
        config.update(resources[("ConfigMap", name)].get("data", {}))
env_names = list(config) + [e["name"] for e in container.get("env", [])]
for entry in container.get("env", []):
    ref = entry.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        secret = resources.get(("Secret", ref["name"]))
        if secret is None or ref["key"] not in {**secret.get("data", {}), **secret.get("stringData", {})}:
            fail(f"{entry['name']}: Secret {ref['name']} has no key {ref['key']}")
for volume in spec.get("volumes", []):
    if "secret" in volume:
        secret = resources.get(("Secret", volume["secret"]["secretName"]))
        if secret is None:
            fail(f"volume {volume['name']}: Secret {volume['secret']['secretName']} is not in the kustomization")
            continue
        keys = {**secret.get("data", {}), **secret.get("stringData", {})}
        for item in volume["secret"].get("items", []):
            if item["key"] not in keys:
                fail(f"volume {volume['name']}: Secret {secret['metadata']['name']} has no key {item['key']}")

# Every CURSOR_RUNNER_* name is one the binary reads (a misspelt one would be ignored).
sources = "../../services/runner/src"
if os.path.isdir(sources):
    known = set()
    for path in glob.glob(f"{sources}/*.rs"):
        known |= set(re.findall(r'"(CURSOR_RUNNER_[A-Z0-9_]+)"', open(path).read()))
    for name in env_names:
        if name.startswith("CURSOR_RUNNER_") and name not in known:
            fail(f"{name}: no such setting in services/runner/src")
    if "CURSOR_RUNNER_AGENT_COMMAND" in config and "CURSOR_RUNNER_DISTRIBUTION_MANIFEST" in config:
        fail("CURSOR_RUNNER_AGENT_COMMAND and CURSOR_RUNNER_DISTRIBUTION_MANIFEST conflict")

# The listener, the container port, the probes and the Service agree.
listen_port = int(config.get("CURSOR_RUNNER_LISTEN", "127.0.0.1:50051").rsplit(":", 1)[1])
if config.get("CURSOR_RUNNER_LISTEN", "").startswith("127."):
    fail("CURSOR_RUNNER_LISTEN is loopback: neither the probes nor the Service could reach it")
ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
if ports.get("grpc") != listen_port:
    fail(f"container port grpc {ports.get('grpc')} is not CURSOR_RUNNER_LISTEN's port {listen_port}")
expected = {
    "startupProbe": None,
    "readinessProbe": "cursor_runner.v1.RunnerService",
    "livenessProbe": "",
}
# Kubernetes gRPC probes cannot speak TLS: with TLS on, the probes are exec probes running
# `cursor-runner healthcheck --service <name>`, which reads the CA and name from the
# ConfigMap (CURSOR_RUNNER_HEALTHCHECK_CA / _TLS_DOMAIN); without it, gRPC probes.
tls_on = "CURSOR_RUNNER_TLS_CERT" in config
if tls_on and "CURSOR_RUNNER_HEALTHCHECK_CA" not in config:
    fail("TLS is on but CURSOR_RUNNER_HEALTHCHECK_CA is not set: the exec probes could not verify it")
for probe, service_name in expected.items():
    probe_spec = container.get(probe, {})
    if tls_on:
        command = probe_spec.get("exec", {}).get("command")
        if not command or command[:2] != ["cursor-runner", "healthcheck"]:
            fail(f"{probe}: with TLS on, an exec probe running `cursor-runner healthcheck`")
            continue
        if service_name is not None and (
            "--service" not in command or command[command.index("--service") + 1] != service_name
        ):
            fail(f"{probe}: --service {service_name!r} expected in {command}")
        continue
    grpc = probe_spec.get("grpc")
    if grpc is None:
        fail(f"{probe}: not a gRPC probe")
        continue
    if grpc.get("port") != listen_port:
        fail(f"{probe}: port {grpc.get('port')} is not {listen_port}")
    if service_name is not None and grpc.get("service") != service_name:
        fail(f"{probe}: service {grpc.get('service')!r}, expected {service_name!r}")
# README says which kind of probe the manifests use (it once said gRPC probes while they
# were exec probes): its Kubernetes paragraph names `cursor-runner healthcheck` exec
# probes, or `grpc:` probes, as the manifests do.
readme = "../../README.md"
if os.path.exists(readme):
    kinds = {("exec" if "exec" in container.get(p, {}) else "grpc" if "grpc" in container.get(p, {}) else "other")
             for p in expected}
    text = open(readme).read()
    paragraph = re.search(r"^- \*\*Kubernetes\*\*:.*?(?=^- \*\*|^## |\Z)", text, re.S | re.M)
    paragraph = " ".join(paragraph.group(0).split()) if paragraph else ""
    says_exec = "exec probes" in paragraph and "cursor-runner healthcheck" in paragraph
    says_grpc = "`grpc:` probes" in paragraph or "Probes are gRPC" in paragraph
    if kinds == {"exec"} and (not says_exec or says_grpc):
        fail("README.md's Kubernetes paragraph must say the probes are exec probes running "
             "`cursor-runner healthcheck` (and not gRPC probes), as deployment.yaml has them")
    elif kinds == {"grpc"} and not says_grpc:
        fail("README.md's Kubernetes paragraph must say the probes are `grpc:` probes, as deployment.yaml has them")

for port in service["spec"]["ports"]:
    if port["targetPort"] not in ports:
        fail(f"Service port {port['name']}: targetPort {port['targetPort']} is no container port")

# Each pod is a replica under its own name and advertises the address the others forward its
# calls to: its pod IP and the internal listener's port, which the container declares, the
# NetworkPolicy admits only from the runner's pods, and whose fleet token file is mounted.
env = {e["name"]: e for e in container.get("env", [])}
def field_ref(name):
    return env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
if field_ref("CURSOR_RUNNER_REPLICA_NAME") != "metadata.name":
    fail("CURSOR_RUNNER_REPLICA_NAME must be the pod's name (fieldRef metadata.name): one name per replica")
internal = config.get("CURSOR_RUNNER_INTERNAL_LISTEN", "")
internal_port = int(internal.rsplit(":", 1)[1]) if ":" in internal else None
if ports.get("internal") != internal_port:
    fail(f"container port internal {ports.get('internal')} is not CURSOR_RUNNER_INTERNAL_LISTEN's port {internal_port}")
advertised = env.get("CURSOR_RUNNER_ADVERTISE_ADDRESS", {}).get("value", "")
pod_ip = [n for n in env if field_ref(n) == "status.podIP"]
if not pod_ip or advertised not in (f"$({pod_ip[0]}):{internal_port}", f"[$({pod_ip[0]})]:{internal_port}"):
    fail(f"CURSOR_RUNNER_ADVERTISE_ADDRESS {advertised!r} must be the pod IP (fieldRef status.podIP) and port {internal_port}")
token_file = config.get("CURSOR_RUNNER_FLEET_TOKEN_FILE", "")
mounted_secrets = {
    m["mountPath"]: next((v for v in spec.get("volumes", []) if v["name"] == m["name"]), {})
    for m in container.get("volumeMounts", [])
}
directory, _, file_name = token_file.rpartition("/")
token_volume = mounted_secrets.get(directory, {}).get("secret")
if token_volume is None or file_name not in [i["path"] for i in token_volume.get("items", [])]:
    fail(f"CURSOR_RUNNER_FLEET_TOKEN_FILE {token_file} is not a mounted Secret key")
if tls_on and not (config.get("CURSOR_RUNNER_INTERNAL_TLS_CA") and config.get("CURSOR_RUNNER_INTERNAL_TLS_DOMAIN")):
    fail("TLS is on: the internal listener serves it too, so CURSOR_RUNNER_INTERNAL_TLS_CA and _DOMAIN are needed")
if tls_on and "CURSOR_RUNNER_ALLOW_PLAINTEXT" in config:
    fail("CURSOR_RUNNER_ALLOW_PLAINTEXT with TLS on: nothing needs it, and it would let a listener go plaintext")
policies = [r for (k, _), r in resources.items() if k == "NetworkPolicy"]
admitted = [
    rule for policy in policies for rule in policy["spec"].get("ingress", [])
    if "internal" in [p.get("port") for p in rule.get("ports", [])]
]
if not admitted or any(
    [f.get("podSelector", {}).get("matchLabels") for f in rule.get("from", [])] != [labels] for rule in admitted
):
    fail("a NetworkPolicy must admit the internal port from the runner's pods only")

# The kubelet's SIGKILL comes after the whole drain: deadline, cancel grace, stop grace.
drain = sum(
    int(config.get(name, default))
    for name, default in [
        ("CURSOR_RUNNER_DRAIN_DEADLINE_SECS", 30),
        ("CURSOR_RUNNER_CANCEL_GRACE_SECS", 15),
        ("CURSOR_RUNNER_STOP_GRACE_SECS", 5),
    ]
)
grace = spec.get("terminationGracePeriodSeconds", 30)
if grace < drain + 5:
    fail(f"terminationGracePeriodSeconds {grace} < drain + cancel grace + stop grace ({drain}) + 5 s margin")

# Writable paths on a read-only root.
security = container.get("securityContext", {})
if security.get("readOnlyRootFilesystem") is not True:
    fail("readOnlyRootFilesystem must be true")
mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
state_dir = config.get("CURSOR_RUNNER_STATE_DIR")
if state_dir not in mounts:
    fail(f"the state dir {state_dir} is not a mounted volume (the root filesystem is read-only)")
if "ALL" not in security.get("capabilities", {}).get("drop", []):
    fail("capabilities: drop ALL, then add only what isolation needs")

if failures:
    sys.exit(f"{len(failures)} failure(s)")
print(f"ok   cross-references: selectors, ports, probes (as README says), secrets, settings, "
      f"grace {grace} s >= {drain} s + margin, the budget allows {allowed} eviction(s)")
PYTHON
