"""The official Python `kubernetes` client against `capstan serve`: CRUD, list and watch, every
patch type, a capstan kind (BareMetalHost, served from its CustomResourceDefinition-style schema),
the review APIs, and the 401 / 403 answers with kube-apiserver's reasons.

Usage: client.py KUBECONFIG CA_FILE. Prints one `ok: <step>` line per step; any failure raises.
"""

import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

KUBECONFIG, CA_FILE = sys.argv[1], sys.argv[2]
NS = "py"


def step(name):
    print(f"ok: {name}", flush=True)


def expect_error(status, reason, call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ApiException as err:
        assert err.status == status, f"{err.status} != {status}: {err.body}"
        if reason:
            assert f'"reason":"{reason}"' in err.body.replace(" ", ""), err.body
        return err
    raise AssertionError(f"expected {status} from {call.__name__}")


admin = config.new_client_from_config(config_file=KUBECONFIG)
core = client.CoreV1Api(admin)
rbac = client.RbacAuthorizationV1Api(admin)
custom = client.CustomObjectsApi(admin)

# CRUD on built-in kinds.
core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
created = core.create_namespaced_config_map(
    NS,
    client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings", labels={"app": "py"}), data={"a": "1"}),
)
assert created.metadata.resource_version and created.metadata.uid
read = core.read_namespaced_config_map("settings", NS)
assert read.data == {"a": "1"}
read.data["b"] = "2"
replaced = core.replace_namespaced_config_map("settings", NS, read)
assert replaced.data == {"a": "1", "b": "2"}
stale = read
stale.data["c"] = "3"
expect_error(409, "Conflict", core.replace_namespaced_config_map, "settings", NS, stale)
step("create, read, replace, conflict")

secret = core.create_namespaced_secret(
    NS, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"password": "pw"})
)
assert secret.data == {"password": "cHc="}, secret.data
step("secret stringData folded into data")

# Every patch type. The typed API picks JSON patch for a list body and strategic merge for a dict;
# merge and apply patches go through the same client with their content type set.
def patch_as(path, body, content_type, **query):
    return admin.call_api(
        path, "PATCH", query_params=list(query.items()),
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body, response_type="object", auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )


settings = f"/api/v1/namespaces/{NS}/configmaps/settings"
patched = core.patch_namespaced_config_map("settings", NS, [{"op": "add", "path": "/data/json", "value": "patch"}])
assert patched.data["json"] == "patch"
patched = patch_as(settings, {"data": {"b": None, "merge": "yes"}}, "application/merge-patch+json")
assert "b" not in patched["data"] and patched["data"]["merge"] == "yes"
patched = core.patch_namespaced_config_map("settings", NS, {"metadata": {"labels": {"tier": "x"}}})
assert patched.metadata.labels == {"app": "py", "tier": "x"}
applied = patch_as(
    settings,
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"applied": "1"}},
    "application/apply-patch+yaml", fieldManager="py-client",
)
assert applied["data"]["applied"] == "1"
step("json, merge, strategic merge and apply patches")

# List with a selector, then a watch from the list's resourceVersion.
listed = core.list_namespaced_config_map(NS, label_selector="app=py")
assert [c.metadata.name for c in listed.items] == ["settings"]
since = listed.metadata.resource_version
core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="watched")))
core.patch_namespaced_config_map("watched", NS, {"data": {"x": "1"}})
core.delete_namespaced_config_map("watched", NS)
seen = []
w = watch.Watch()
for event in w.stream(core.list_namespaced_config_map, NS, resource_version=since, timeout_seconds=30):
    if event["object"].metadata.name == "watched":
        seen.append(event["type"])
    if event["type"] == "DELETED":
        w.stop()
assert seen == ["ADDED", "MODIFIED", "DELETED"], seen
step("list with a label selector and watch")

# A capstan kind, through the custom objects API.
host = {
    "apiVersion": "metal3.io/v1alpha1",
    "kind": "BareMetalHost",
    "metadata": {"name": "node-0", "labels": {"role": "worker"}},
    "spec": {
        "online": True,
        "bootMACAddress": "52:54:00:00:00:01",
        "bmc": {"address": "redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/1", "credentialsName": "creds"},
    },
}
made = custom.create_namespaced_custom_object("metal3.io", "v1alpha1", NS, "baremetalhosts", host)
assert made["metadata"]["generation"] == 1
got = custom.get_namespaced_custom_object("metal3.io", "v1alpha1", NS, "baremetalhosts", "node-0")
assert got["spec"]["bootMACAddress"] == "52:54:00:00:00:01"
hosts = custom.list_namespaced_custom_object("metal3.io", "v1alpha1", NS, "baremetalhosts", label_selector="role=worker")
assert [h["metadata"]["name"] for h in hosts["items"]] == ["node-0"]
moved = custom.patch_namespaced_custom_object(
    "metal3.io", "v1alpha1", NS, "baremetalhosts", "node-0", {"spec": {"online": False}}
)
assert moved["spec"]["online"] is False and moved["metadata"]["generation"] == 2
custom.delete_namespaced_custom_object("metal3.io", "v1alpha1", NS, "baremetalhosts", "node-0")
expect_error(404, "NotFound", custom.get_namespaced_custom_object, "metal3.io", "v1alpha1", NS, "baremetalhosts", "node-0")
step("BareMetalHost create, get, list, patch, delete")

# Identities and rights: whoami, a ServiceAccount with `view`, its token, and the 401 / 403 answers.
me = client.AuthenticationV1Api(admin).create_self_subject_review(client.V1SelfSubjectReview())
assert me.status.user_info.username == "capstan-admin", me.status.user_info
core.create_namespaced_service_account(NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="viewer")))
rbac.create_namespaced_role_binding(
    NS,
    client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="viewer-view"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="viewer", namespace=NS)],
    ),
)
token = core.create_namespaced_service_account_token(
    "viewer", NS, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
).status.token


def client_with(bearer):
    configuration = client.Configuration()
    configuration.host = admin.configuration.host
    configuration.ssl_ca_cert = CA_FILE
    configuration.api_key = {"authorization": f"Bearer {bearer}"}
    return client.ApiClient(configuration)


viewer = client_with(token)
viewer_core = client.CoreV1Api(viewer)
assert [c.metadata.name for c in viewer_core.list_namespaced_config_map(NS).items] == ["settings"]
err = expect_error(403, "Forbidden", viewer_core.list_namespaced_secret, NS)
assert (
    'User \\"system:serviceaccount:py:viewer\\" cannot list resource \\"secrets\\" in API group \\"\\" in the namespace \\"py\\"'
    in err.body
), err.body
expect_error(403, "Forbidden", viewer_core.delete_namespaced_config_map, "settings", NS)
review = client.AuthorizationV1Api(viewer).create_self_subject_access_review(
    client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(namespace=NS, verb="get", resource="secrets")
        )
    )
)
assert review.status.allowed is False
who = client.AuthenticationV1Api(viewer).create_self_subject_review(client.V1SelfSubjectReview())
assert who.status.user_info.username == "system:serviceaccount:py:viewer"
expect_error(401, "Unauthorized", client.CoreV1Api(client_with("not-a-token")).list_namespaced_config_map, NS)
step("whoami, ServiceAccount token, 403 and 401")

core.delete_namespace(NS)
step("done")
