#!/usr/bin/python3
# capstan's TEST STAND-IN for kubeadm, installed as /usr/local/bin/kubeadm in the image that
# `capstan ramdisk cloud-image` builds. It is NOT kubeadm: no registry here ships kubeadm, so this
# stand-in does what the end-to-end tests need a node to prove about capstan's bootstrap data.
#
# `kubeadm init --config FILE` and `kubeadm join --config FILE`:
#   - parse FILE as kubeadm does (multi-document YAML, apiVersion kubeadm.k8s.io/v1beta3 or v1beta4)
#     and refuse what kubeadm would refuse here (wrong kinds, missing endpoint, token or CA hashes);
#   - check that the certificates cloud-init wrote are where kubeadm reads them, keys 0600;
#   - register this node in the workload cluster's API (a capstan API server in the tests):
#       init: as kubernetes-admin (system:masters), with a client certificate it signs with
#             /etc/kubernetes/pki/ca.key as kubeadm's admin.conf; uploads kube-system/kubeadm-config
#             and kube-public/cluster-info and sets up the bootstrap RBAC as kubeadm init does (plus
#             one stand-in rule: bootstrappers may register Nodes, see bootstrap_rbac);
#       join: with the bootstrap token, after checking the cluster CA against caCertHashes;
#   - print each step as `capstan-kubeadm-standin: ...` (the serial console and
#     /var/log/cloud-init-output.log show them) and exit non-zero on the first failure.
# Anything else (`kubeadm version`, `kubeadm reset`) prints what it would do and succeeds.

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import yaml

PKI = "/etc/kubernetes/pki"
VERSIONS = ("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4")


def say(message):
    print(f"capstan-kubeadm-standin: {message}", flush=True)
    try:
        with open("/dev/console", "w") as console:
            console.write(f"capstan-kubeadm-standin: {message}\n")
    except OSError:
        pass


def fail(message):
    say(f"FAILED: {message}")
    sys.exit(1)


def load_config(path):
    try:
        with open(path) as f:
            documents = [d for d in yaml.safe_load_all(f) if d]
    except (OSError, yaml.YAMLError) as e:
        fail(f"reading {path}: {e}")
    by_kind = {}
    for document in documents:
        if document.get("apiVersion") not in VERSIONS:
            fail(f"{path}: apiVersion {document.get('apiVersion')!r} is not one of {VERSIONS}")
        by_kind[document.get("kind")] = document
    say(f"config {path}: {', '.join(sorted(by_kind))} ({documents[0]['apiVersion'] if documents else '-'})")
    return by_kind


def extra_args(registration):
    """kubeletExtraArgs as a dict: a map in v1beta3, a list of {name, value} in v1beta4."""
    args = registration.get("kubeletExtraArgs") or {}
    if isinstance(args, list):
        return {a.get("name"): a.get("value") for a in args}
    return dict(args)


def check_key_modes(paths):
    for path in paths:
        if not os.path.exists(path):
            fail(f"{path} is missing")
        mode = os.stat(path).st_mode & 0o777
        if path.endswith(".key") and mode != 0o600:
            fail(f"{path} has mode {mode:o}, kubeadm wants 0600")
    say(f"certificates present: {len(paths)} files, keys 0600")


def node_object(registration):
    name = registration.get("name") or os.uname().nodename
    args = extra_args(registration)
    labels = {"kubernetes.io/hostname": name}
    for pair in filter(None, (args.get("node-labels") or "").split(",")):
        key, _, value = pair.partition("=")
        labels[key] = value
    spec = {}
    if args.get("provider-id"):
        spec["providerID"] = args["provider-id"]
    taints = registration.get("taints")
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


class Api:
    def __init__(self, endpoint, context, token=None):
        self.base = f"https://{endpoint}"
        self.context = context
        self.token = token

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, {}
        except (urllib.error.URLError, OSError) as e:
            fail(f"{method} {self.base}{path}: {e}")

    def create(self, path, body, what):
        status, _ = self.request("POST", path, body)
        if status == 409:
            say(f"{what} exists already")
        elif status >= 300:
            fail(f"creating {what}: HTTP {status}")
        else:
            say(f"created {what}")


def admin_credentials(workdir):
    """A client certificate for kubernetes-admin in system:masters signed by the cluster CA: the
    identity of the admin.conf kubeadm init writes and uses for its own uploads."""
    return client_credentials("/O=system:masters/CN=kubernetes-admin", "admin", workdir)


def client_credentials(subject, name, workdir):
    """A client certificate with `subject` signed by the cluster CA the bootstrap data wrote."""
    key, csr, crt, ext = (os.path.join(workdir, f)
                          for f in (f"{name}.key", f"{name}.csr", f"{name}.crt", f"{name}.ext"))
    # An X.509 v3 client certificate, as kubeadm issues: TLS stacks refuse v1 certificates.
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", csr, "-subj", subject],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", f"{PKI}/ca.crt",
                    "-CAkey", f"{PKI}/ca.key", "-CAcreateserial", "-out", crt, "-days", "1",
                    "-extfile", ext],
                   check=True, capture_output=True)
    return crt, key


def ca_hash(ca_pem):
    """sha256 of the CA's Subject Public Key Info, as kubeadm's caCertHashes carry it."""
    cert = subprocess.run(["openssl", "x509", "-pubkey", "-noout"], input=ca_pem,
                          check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=cert,
                         check=True, capture_output=True).stdout
    return "sha256:" + hashlib.sha256(der).hexdigest()


def init(config_path):
    config = load_config(config_path)
    cluster = config.get("ClusterConfiguration") or fail("no ClusterConfiguration in the init config")
    init_config = config.get("InitConfiguration") or fail("no InitConfiguration in the init config")
    endpoint = cluster.get("controlPlaneEndpoint") or fail("ClusterConfiguration has no controlPlaneEndpoint")
    check_key_modes([f"{PKI}/ca.crt", f"{PKI}/ca.key", f"{PKI}/etcd/ca.crt", f"{PKI}/etcd/ca.key",
                     f"{PKI}/front-proxy-ca.crt", f"{PKI}/front-proxy-ca.key", f"{PKI}/sa.pub", f"{PKI}/sa.key"])
    node = node_object(init_config.get("nodeRegistration") or {})
    with tempfile.TemporaryDirectory() as workdir:
        crt, key = admin_credentials(workdir)
        context = ssl.create_default_context(cafile=f"{PKI}/ca.crt")
        context.check_hostname = False
        context.load_cert_chain(crt, key)
        api = Api(endpoint, context)
        say(f"init: control plane endpoint {endpoint}")
        with open(f"{PKI}/ca.crt", "rb") as f:
            ca_pem = f.read()
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "kube-public"}}, "namespace kube-public")
        kubeconfig = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "", "cluster": {
            "server": f"https://{endpoint}",
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}]})
        api.create("/api/v1/namespaces/kube-public/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"},
            "data": {"kubeconfig": kubeconfig}}, "kube-public/cluster-info")
        api.create("/api/v1/namespaces/kube-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config"},
            "data": {"ClusterConfiguration": yaml.safe_dump(cluster)}}, "kube-system/kubeadm-config")
        bootstrap_rbac(api)
        # The real kubelet registers its Node with its own credentials; the stand-in uses admin's.
        api.create("/api/v1/nodes", node, f"node {node['metadata']['name']}")
    say("init: done")


def bootstrap_rbac(api):
    """The RBAC kubeadm init sets up for joining nodes: bootstrap tokens may act as node
    bootstrappers and read kube-public/cluster-info (kubeadm grants that to system:anonymous;
    capstan's API serves no anonymous requests, so the tokens' group gets it). One stand-in rule
    more: bootstrappers may register Nodes themselves, in place of the kubelet's certificate
    request, which kube-controller-manager would sign and approve (none runs here)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    bootstrappers = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                      "name": "system:bootstrappers"}]
    api.create(f"{rbac}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kubeadm:kubelet-bootstrap"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": bootstrappers}, "clusterrolebinding kubeadm:kubelet-bootstrap")
    api.create(f"{rbac}/namespaces/kube-public/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"],
                   "verbs": ["get"]}]}, "role kube-public/kubeadm:bootstrap-signer-clusterinfo")
    api.create(f"{rbac}/namespaces/kube-public/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "kubeadm:bootstrap-signer-clusterinfo"},
        "subjects": bootstrappers}, "rolebinding kube-public/kubeadm:bootstrap-signer-clusterinfo")
    api.create(f"{rbac}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "capstan-standin:node-registration"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["create", "get"]}]},
        "clusterrole capstan-standin:node-registration")
    api.create(f"{rbac}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "capstan-standin:node-registration"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "capstan-standin:node-registration"},
        "subjects": bootstrappers}, "clusterrolebinding capstan-standin:node-registration")


def join(config_path):
    config = load_config(config_path)
    join_config = config.get("JoinConfiguration") or fail("no JoinConfiguration in the join config")
    discovery = (join_config.get("discovery") or {}).get("bootstrapToken") or fail("no discovery.bootstrapToken")
    endpoint = discovery.get("apiServerEndpoint") or fail("discovery.bootstrapToken has no apiServerEndpoint")
    token = discovery.get("token") or fail("discovery.bootstrapToken has no token")
    hashes = discovery.get("caCertHashes") or []
    if not hashes and not discovery.get("unsafeSkipCAVerification"):
        fail("discovery.bootstrapToken has no caCertHashes (and unsafeSkipCAVerification is not set)")
    if join_config.get("controlPlane") is not None:
        check_key_modes([f"{PKI}/ca.crt", f"{PKI}/ca.key", f"{PKI}/etcd/ca.crt", f"{PKI}/etcd/ca.key",
                         f"{PKI}/front-proxy-ca.crt", f"{PKI}/front-proxy-ca.key", f"{PKI}/sa.pub", f"{PKI}/sa.key"])
    say(f"join: endpoint {endpoint}, token {token.split('.')[0]}.<redacted>")
    # Discovery trusts nothing until the CA matches a pinned hash, as kubeadm does.
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    status, info = Api(endpoint, insecure, token).request(
        "GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
    if status != 200:
        fail(f"reading kube-public/cluster-info with the bootstrap token: HTTP {status}")
    cluster_info = yaml.safe_load(info.get("data", {}).get("kubeconfig", "")) or {}
    ca_data = cluster_info["clusters"][0]["cluster"]["certificate-authority-data"]
    ca_pem = base64.b64decode(ca_data)
    actual = ca_hash(ca_pem)
    if hashes and actual not in hashes:
        fail(f"the cluster CA's hash {actual} is not one of caCertHashes {hashes}")
    say(f"join: cluster CA matches {actual}")
    with tempfile.NamedTemporaryFile(suffix=".crt") as ca_file:
        ca_file.write(ca_pem)
        ca_file.flush()
        context = ssl.create_default_context(cafile=ca_file.name)
        context.check_hostname = False
        node = node_object(join_config.get("nodeRegistration") or {})
        Api(endpoint, context, token).create("/api/v1/nodes", node, f"node {node['metadata']['name']}")
    say("join: done")


def main(argv):
    command = argv[1] if len(argv) > 1 else ""
    config = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            config = argv[i + 1]
        elif arg.startswith("--config="):
            config = arg.split("=", 1)[1]
    say(f"kubeadm {' '.join(argv[1:])}")
    if command in ("init", "join") and not config:
        fail(f"kubeadm {command} without --config")
    if command == "init":
        init(config)
    elif command == "join":
        join(config)
    else:
        say(f"`{command}` is not simulated; nothing done")


if __name__ == "__main__":
    main(sys.argv)
