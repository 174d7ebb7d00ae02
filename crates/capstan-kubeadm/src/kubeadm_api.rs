//! The kubeadm configuration files a node runs `kubeadm init` or `kubeadm join` with, written from a
//! Cluster API KubeadmConfig spec in the kubeadm API the node's Kubernetes version reads.
//!
//! - `kubeadm.k8s.io/v1beta3` for Kubernetes 1.22–1.30: `extraArgs` and `kubeletExtraArgs` are maps,
//!   timeouts are `apiServer.timeoutForControlPlane` and `discovery.timeout`.
//! - `kubeadm.k8s.io/v1beta4` from 1.31: `extraArgs` are lists of `{name, value}`, timeouts live in
//!   `timeouts`, `certificateValidityPeriod` replaces nothing older.
//!
//! The spec is taken as JSON (whatever version of KubeadmConfig it was read as), so fields capstan's
//! typed model does not know still reach kubeadm. Cluster API's own fields are translated
//! (`ttlSeconds` → `ttl`, `*Seconds` timeouts → durations) or dropped when kubeadm has no
//! equivalent; what only the Cluster knows (name, version, endpoint, networking) is filled in here.

use serde_json::{Map, Value, json};

/// Why no kubeadm configuration could be written.
#[derive(Debug, thiserror::Error)]
pub enum KubeadmApiError {
    #[error(
        "Kubernetes version {0:?} is not of the form v1.MINOR.PATCH; set spec.version of the Machine or KubeadmControlPlane"
    )]
    BadVersion(String),
    #[error(
        "Kubernetes {0} is older than 1.22, the oldest version whose kubeadm configuration API (v1beta3) capstan writes; upgrade the cluster's version"
    )]
    Unsupported(String),
}

/// A parsed Kubernetes `major.minor.patch` version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KubeVersion {
    /// Parses `v1.31.2` (the `v` is optional; pre-release and build suffixes are ignored).
    pub fn parse(text: &str) -> Result<Self, KubeadmApiError> {
        let bad = || KubeadmApiError::BadVersion(text.to_owned());
        let core = text.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut next = || -> Result<u32, KubeadmApiError> {
            parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())
        };
        let version = Self {
            major: next()?,
            minor: next()?,
            patch: next().unwrap_or(0),
        };
        Ok(version)
    }

    /// The kubeadm configuration API this version's kubeadm reads.
    pub fn kubeadm_api(self) -> Result<KubeadmApi, KubeadmApiError> {
        match (self.major, self.minor) {
            (1, 22..=30) => Ok(KubeadmApi::V1Beta3),
            (1, m) if m >= 31 => Ok(KubeadmApi::V1Beta4),
            _ => Err(KubeadmApiError::Unsupported(self.to_string())),
        }
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A version of kubeadm's configuration API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeadmApi {
    V1Beta3,
    V1Beta4,
}

impl KubeadmApi {
    /// `apiVersion` of its documents.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1Beta3 => "kubeadm.k8s.io/v1beta3",
            Self::V1Beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

/// What the Cluster and Machine contribute to the kubeadm configuration.
#[derive(Clone, Debug, Default)]
pub struct ClusterFacts {
    pub cluster_name: String,
    /// `host:port` of the control-plane endpoint.
    pub control_plane_endpoint: String,
    /// The Machine's Kubernetes version (`v1.31.2`).
    pub kubernetes_version: String,
    /// `Cluster.spec.clusterNetwork`, as JSON (`pods.cidrBlocks`, `services.cidrBlocks`,
    /// `serviceDomain`).
    pub cluster_network: Value,
}

/// Cluster API fields that kubeadm does not know, anywhere in a configuration.
const CAPI_ONLY: &[&str] = &[
    "certificateValidityPeriodDays",
    "caCertificateValidityPeriodDays",
];

/// Fields kubeadm's v1beta4 added, which v1beta3's kubeadm refuses.
const V1BETA4_ONLY: &[&str] = &[
    "imagePullSerial",
    "extraEnvs",
    "encryptionAlgorithm",
    "certificateValidityPeriod",
    "caCertificateValidityPeriod",
];

/// Rewrites `value` for `api`: `extraArgs`/`kubeletExtraArgs` in the API's form, `ttlSeconds` as
/// `ttl`, Cluster API-only fields removed.
fn translate(value: &mut Value, api: KubeadmApi) {
    match value {
        Value::Object(map) => {
            for key in CAPI_ONLY {
                map.remove(*key);
            }
            if api == KubeadmApi::V1Beta3 {
                for key in V1BETA4_ONLY {
                    map.remove(*key);
                }
            }
            if let Some(ttl) = map.remove("ttlSeconds")
                && let Some(seconds) = ttl.as_i64()
            {
                map.insert("ttl".into(), Value::String(format!("{seconds}s")));
            }
            for (key, child) in map.iter_mut() {
                if key == "extraArgs" || key == "kubeletExtraArgs" {
                    *child = args(child, api);
                } else {
                    translate(child, api);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| translate(item, api)),
        _ => {}
    }
}

/// Arguments (a map or a `{name, value}` list) in `api`'s form.
fn args(value: &Value, api: KubeadmApi) -> Value {
    let pairs: Vec<(String, String)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), scalar(v))).collect(),
        Value::Array(items) => items
            .iter()
            .filter_map(|item| Some((item["name"].as_str()?.to_owned(), scalar(&item["value"]))))
            .collect(),
        _ => Vec::new(),
    };
    match api {
        KubeadmApi::V1Beta3 => Value::Object(
            pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        ),
        KubeadmApi::V1Beta4 => Value::Array(
            pairs
                .into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect(),
        ),
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn duration(seconds: &Value) -> Option<Value> {
    seconds.as_i64().map(|s| Value::String(format!("{s}s")))
}

/// Moves Cluster API's `timeouts.*Seconds` to where `api` wants them; `section` is the
/// Init/JoinConfiguration being written and `cluster` the ClusterConfiguration (for v1beta3's
/// `apiServer.timeoutForControlPlane`).
fn timeouts(
    section: &mut Map<String, Value>,
    cluster: Option<&mut Map<String, Value>>,
    api: KubeadmApi,
) {
    let Some(Value::Object(capi)) = section.remove("timeouts") else {
        return;
    };
    match api {
        KubeadmApi::V1Beta4 => {
            let converted: Map<String, Value> = capi
                .iter()
                .filter_map(|(key, seconds)| {
                    let name = key.strip_suffix("Seconds")?;
                    Some((name.to_owned(), duration(seconds)?))
                })
                .collect();
            if !converted.is_empty() {
                section.insert("timeouts".into(), Value::Object(converted));
            }
        }
        KubeadmApi::V1Beta3 => {
            if let (Some(cluster), Some(t)) = (
                cluster,
                capi.get("controlPlaneComponentHealthCheckSeconds")
                    .and_then(duration),
            ) {
                let api_server = cluster
                    .entry("apiServer")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(api_server) = api_server {
                    api_server.insert("timeoutForControlPlane".into(), t);
                }
            }
            if let Some(t) = capi.get("tlsBootstrapSeconds").and_then(duration)
                && let Some(Value::Object(discovery)) = section.get_mut("discovery")
            {
                discovery.insert("timeout".into(), t);
            }
        }
    }
}

fn object(value: Option<&Value>) -> Map<String, Value> {
    match value {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    }
}

fn header(map: &mut Map<String, Value>, api: KubeadmApi, kind: &str) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api.api_version().into()));
    out.insert("kind".into(), Value::String(kind.into()));
    out.append(map);
    out
}

/// The ClusterConfiguration document for `spec` (a KubeadmConfig spec as JSON).
pub fn cluster_configuration(spec: &Value, facts: &ClusterFacts, api: KubeadmApi) -> Value {
    let mut cluster = object(spec.get("clusterConfiguration"));
    cluster.insert(
        "clusterName".into(),
        Value::String(facts.cluster_name.clone()),
    );
    cluster.insert(
        "controlPlaneEndpoint".into(),
        Value::String(facts.control_plane_endpoint.clone()),
    );
    cluster.insert(
        "kubernetesVersion".into(),
        Value::String(facts.kubernetes_version.clone()),
    );
    let mut networking = object(cluster.get("networking"));
    let joined = |path: &str| -> Option<String> {
        let blocks = facts.cluster_network.pointer(path)?.as_array()?;
        let blocks: Vec<&str> = blocks.iter().filter_map(Value::as_str).collect();
        (!blocks.is_empty()).then(|| blocks.join(","))
    };
    if let Some(pods) = joined("/pods/cidrBlocks") {
        networking.insert("podSubnet".into(), Value::String(pods));
    }
    if let Some(services) = joined("/services/cidrBlocks") {
        networking.insert("serviceSubnet".into(), Value::String(services));
    }
    if let Some(domain) = facts
        .cluster_network
        .get("serviceDomain")
        .and_then(Value::as_str)
    {
        networking.insert("dnsDomain".into(), Value::String(domain.to_owned()));
    }
    if !networking.is_empty() {
        cluster.insert("networking".into(), Value::Object(networking));
    }
    let mut cluster = Value::Object(header(&mut cluster, api, "ClusterConfiguration"));
    translate(&mut cluster, api);
    cluster
}

/// The `/run/kubeadm/kubeadm.yaml` of the node that runs `kubeadm init`: ClusterConfiguration and
/// InitConfiguration.
pub fn init_documents(spec: &Value, facts: &ClusterFacts, api: KubeadmApi) -> Vec<Value> {
    let mut init = object(spec.get("initConfiguration"));
    let mut cluster = match cluster_configuration(spec, facts, api) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    timeouts(&mut init, Some(&mut cluster), api);
    let mut init = Value::Object(header(&mut init, api, "InitConfiguration"));
    translate(&mut init, api);
    vec![Value::Object(cluster), init]
}

/// How a joining node finds and trusts the cluster.
#[derive(Clone, Debug)]
pub struct Discovery {
    /// `host:port` of the API server.
    pub api_server_endpoint: String,
    /// The bootstrap token (`abcdef.0123456789abcdef`).
    pub token: String,
    /// `sha256:…` of the cluster CA's public key.
    pub ca_cert_hash: String,
}

/// The JoinConfiguration document of a joining node; `control_plane` adds a `controlPlane` section
/// (kept from the spec when it has one).
pub fn join_document(
    spec: &Value,
    discovery: &Discovery,
    control_plane: bool,
    api: KubeadmApi,
) -> Value {
    let mut join = object(spec.get("joinConfiguration"));
    let mut found = object(join.get("discovery"));
    // A discovery the user wrote by hand (a file, or their own token) is kept, as Cluster API does.
    if found.get("file").is_none() {
        let mut token = object(found.get("bootstrapToken"));
        token
            .entry("apiServerEndpoint")
            .or_insert_with(|| Value::String(discovery.api_server_endpoint.clone()));
        token
            .entry("token")
            .or_insert_with(|| Value::String(discovery.token.clone()));
        if token.get("caCertHashes").is_none() && token.get("unsafeSkipCAVerification").is_none() {
            token.insert("caCertHashes".into(), json!([discovery.ca_cert_hash]));
        }
        found.insert("bootstrapToken".into(), Value::Object(token));
    }
    join.insert("discovery".into(), Value::Object(found));
    if control_plane {
        join.entry("controlPlane")
            .or_insert_with(|| Value::Object(Map::new()));
    } else {
        join.remove("controlPlane");
    }
    timeouts(&mut join, None, api);
    let mut join = Value::Object(header(&mut join, api, "JoinConfiguration"));
    translate(&mut join, api);
    join
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_the_kubeadm_api() {
        let api = |v: &str| {
            KubeVersion::parse(v)
                .and_then(KubeVersion::kubeadm_api)
                .ok()
        };
        assert_eq!(api("v1.22.0"), Some(KubeadmApi::V1Beta3));
        assert_eq!(api("v1.30.9"), Some(KubeadmApi::V1Beta3));
        assert_eq!(api("v1.31.0"), Some(KubeadmApi::V1Beta4));
        assert_eq!(api("1.33.1+rke2"), Some(KubeadmApi::V1Beta4));
        assert_eq!(api("v1.21.14"), None);
        assert!(matches!(
            KubeVersion::parse("latest"),
            Err(KubeadmApiError::BadVersion(_))
        ));
    }

    fn facts() -> ClusterFacts {
        ClusterFacts {
            cluster_name: "capi-1".into(),
            control_plane_endpoint: "192.0.2.10:6443".into(),
            kubernetes_version: "v1.30.4".into(),
            cluster_network: json!({"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}}),
        }
    }

    #[test]
    fn extra_args_follow_the_api() {
        let spec = json!({
            "clusterConfiguration": {"apiServer": {"extraArgs": [{"name": "audit-log-maxage", "value": "30"}]}},
            "initConfiguration": {
                "nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": "a=b"}], "imagePullSerial": true},
                "bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttlSeconds": 900}],
                "timeouts": {"controlPlaneComponentHealthCheckSeconds": 300}
            },
        });
        let v3 = init_documents(&spec, &facts(), KubeadmApi::V1Beta3);
        assert_eq!(v3[0]["apiVersion"], "kubeadm.k8s.io/v1beta3");
        assert_eq!(v3[0]["apiServer"]["extraArgs"]["audit-log-maxage"], "30");
        assert_eq!(v3[0]["apiServer"]["timeoutForControlPlane"], "300s");
        assert_eq!(v3[0]["networking"]["podSubnet"], "10.244.0.0/16");
        assert_eq!(
            v3[1]["nodeRegistration"]["kubeletExtraArgs"]["node-labels"],
            "a=b"
        );
        assert_eq!(v3[1]["bootstrapTokens"][0]["ttl"], "900s");
        assert!(v3[1].get("timeouts").is_none());
        assert!(v3[1]["nodeRegistration"].get("imagePullSerial").is_none());

        let v4 = init_documents(&spec, &facts(), KubeadmApi::V1Beta4);
        assert_eq!(v4[1]["kind"], "InitConfiguration");
        assert_eq!(v4[1]["nodeRegistration"]["imagePullSerial"], true);
        assert_eq!(
            v4[1]["nodeRegistration"]["kubeletExtraArgs"],
            json!([{"name": "node-labels", "value": "a=b"}])
        );
        assert_eq!(
            v4[1]["timeouts"]["controlPlaneComponentHealthCheck"],
            "300s"
        );
        assert_eq!(
            v4[0]["apiServer"]["extraArgs"],
            json!([{"name": "audit-log-maxage", "value": "30"}])
        );
    }

    #[test]
    fn join_fills_discovery_and_control_plane() {
        let discovery = Discovery {
            api_server_endpoint: "192.0.2.10:6443".into(),
            token: "abcdef.0123456789abcdef".into(),
            ca_cert_hash: "sha256:00".into(),
        };
        let spec = json!({"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"node-labels": "x=y"}}}});
        let cp = join_document(&spec, &discovery, true, KubeadmApi::V1Beta4);
        assert_eq!(
            cp["discovery"]["bootstrapToken"]["token"],
            "abcdef.0123456789abcdef"
        );
        assert_eq!(
            cp["discovery"]["bootstrapToken"]["caCertHashes"],
            json!(["sha256:00"])
        );
        assert_eq!(cp["controlPlane"], json!({}));
        assert_eq!(
            cp["nodeRegistration"]["kubeletExtraArgs"],
            json!([{"name": "node-labels", "value": "x=y"}])
        );
        let worker = join_document(&spec, &discovery, false, KubeadmApi::V1Beta3);
        assert!(worker.get("controlPlane").is_none());
        assert_eq!(
            worker["nodeRegistration"]["kubeletExtraArgs"]["node-labels"],
            "x=y"
        );
    }
}
