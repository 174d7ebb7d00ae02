//! A loopback HTTPS listener per simulated workload cluster, so `kubectl --kubeconfig` works
//! against it: the serving certificate is issued by the cluster's own CA (Secret `<cluster>-ca`,
//! keys `tls.crt`/`tls.key`, as Cluster API writes it) for `127.0.0.1`, `localhost` and the
//! control-plane endpoint host, and client certificates signed by that CA (the admin kubeconfig in
//! `<cluster>-kubeconfig`) are accepted. The URL is published on the Cluster as annotation
//! [`ANNOTATION_API_URL`]; `capstan kubeconfig CLUSTER` rewrites the kubeconfig's server to it.
//!
//! Where it listens ([`Bind`]): a cluster of simulated nodes gets any free loopback port, since
//! only kubectl on this machine dials it. A cluster of real machines gets `127.0.0.1` on the port
//! of its `controlPlaneEndpoint`, because its nodes dial the endpoint: virtual machines on QEMU's
//! user network reach this machine's loopback as `10.0.2.2`, so an endpoint `10.0.2.2:PORT` is
//! this listener (the serving certificate names the endpoint host).

use crate::SimError;
use crate::workload::SimCluster;
use capstan_apiserver::tls::Credentials;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType,
};
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;

/// Annotation on a simulated Cluster: the loopback URL of its workload API.
pub const ANNOTATION_API_URL: &str = "sim.capstan.io/api-url";

pub(crate) fn cluster_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn tls_error(cluster: &SimCluster, reason: impl std::fmt::Display) -> SimError {
    SimError::Tls {
        cluster: cluster.key.clone(),
        reason: reason.to_string(),
    }
}

/// Which port a workload API listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    /// Any free loopback port (simulated nodes; kubectl only).
    AnyLoopbackPort,
    /// `127.0.0.1` on the port of the Cluster's `controlPlaneEndpoint` (real nodes dial it).
    EndpointPort,
}

/// The Cluster's `controlPlaneEndpoint` (host, port), once set.
async fn endpoint(management: &Client, cluster: &SimCluster) -> Option<(String, u16)> {
    let key = &cluster.key;
    let object = cluster_api(management, &key.namespace)
        .get_opt(&key.name)
        .await
        .ok()
        .flatten()?;
    let endpoint = &object.data["spec"]["controlPlaneEndpoint"];
    let host = endpoint["host"].as_str().filter(|h| !h.is_empty())?;
    let port = endpoint["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(6443);
    Some((host.to_owned(), port))
}

/// Starts the listener of `cluster` unless it runs; `Ok(false)` while the cluster CA Secret (or,
/// for [`Bind::EndpointPort`], the Cluster's endpoint) is not there yet.
pub async fn ensure(
    management: &Client,
    cluster: &Arc<SimCluster>,
    bind: Bind,
) -> Result<bool, SimError> {
    if cluster.url().is_some() {
        return Ok(true);
    }
    // Control-plane hosts reconcile concurrently: one of them starts the listener.
    let _one_starter = cluster.listener_start.lock().await;
    if cluster.url().is_some() {
        return Ok(true);
    }
    let key = &cluster.key;
    let secret_name = format!("{}-ca", key.name);
    let secret = Api::<Secret>::namespaced(management.clone(), &key.namespace)
        .get_opt(&secret_name)
        .await
        .map_err(|source| SimError::Management {
            verb: "reading",
            kind: "Secret",
            namespace: key.namespace.clone(),
            name: secret_name.clone(),
            source: Box::new(source),
        })?;
    let Some(data) = secret.and_then(|s| s.data) else {
        return Ok(false);
    };
    let (Some(ca_cert), Some(ca_key)) = (data.get("tls.crt"), data.get("tls.key")) else {
        return Ok(false);
    };
    let ca_cert_pem = String::from_utf8(ca_cert.0.clone())
        .map_err(|_| tls_error(cluster, "tls.crt is not PEM text"))?;
    let ca_key_pem = String::from_utf8(ca_key.0.clone())
        .map_err(|_| tls_error(cluster, "tls.key is not PEM text"))?;
    let endpoint = endpoint(management, cluster).await;
    let port = match (bind, &endpoint) {
        (Bind::AnyLoopbackPort, _) => 0,
        (Bind::EndpointPort, Some((_, port))) => *port,
        (Bind::EndpointPort, None) => return Ok(false),
    };
    let endpoint_host = endpoint.map(|(host, _)| host);
    let ca_key_pair = KeyPair::from_pem(&ca_key_pem)
        .map_err(|e| tls_error(cluster, format!("the CA key: {e}")))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key_pair)
        .map_err(|e| tls_error(cluster, format!("the CA certificate: {e}")))?;
    let server_key = KeyPair::generate().map_err(|e| tls_error(cluster, e))?;
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| tls_error(cluster, e))?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = name;
    let mut sans = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "kubernetes".to_owned(),
    ];
    sans.extend(endpoint_host);
    params.subject_alt_names = sans
        .iter()
        .filter_map(|h| match h.parse::<IpAddr>() {
            Ok(ip) => Some(SanType::IpAddress(ip)),
            Err(_) => h.clone().try_into().ok().map(SanType::DnsName),
        })
        .collect();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params
        .signed_by(&server_key, &issuer)
        .map_err(|e| tls_error(cluster, e))?;
    let credentials = Credentials {
        ca_cert_pem,
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
        admin_cert_pem: String::new(),
        admin_key_pem: String::new(),
        admin_token: String::new(),
    };
    // A workload API is reached by the management side's client and now and then a user's kubectl:
    // a few remembered sessions do (the default cache of 256 was allocated per cluster).
    let config = credentials
        .server_config_with_sessions(std::path::Path::new(&secret_name), 8)
        .map_err(|e| tls_error(cluster, capstan_runtime::controller::ErrorChain(&e)))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| SimError::Io {
            what: if port == 0 {
                "binding a workload API listener"
            } else {
                "binding a workload API listener on the port of the control-plane endpoint"
            },
            source,
        })?;
    let address = listener.local_addr().map_err(|source| SimError::Io {
        what: "reading a workload API listener's address",
        source,
    })?;
    let url = format!("https://{address}");
    let router = cluster.server.router();
    let stop = cluster.shutdown.clone();
    tokio::spawn(async move {
        if let Err(err) =
            capstan_apiserver::serve::serve_tls(router, listener, config, stop.cancelled_owned())
                .await
        {
            tracing::warn!(error = %capstan_runtime::controller::ErrorChain(&err), "simulated workload API listener stopped");
        }
    });
    cluster.set_url(&url);
    let patch = json!({"metadata": {"annotations": {ANNOTATION_API_URL: url}}});
    cluster_api(management, &key.namespace)
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| SimError::Management {
            verb: "annotating",
            kind: "Cluster",
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            source: Box::new(source),
        })?;
    tracing::info!(cluster = %key, %url, "simulated workload API listening");
    Ok(true)
}
