//! Metal3Cluster: the [`InfraClusterProvider`] of the Metal3 provider. A bare-metal cluster's
//! infrastructure is the endpoint people give it (a VIP kube-vip or a load balancer serves), so it is
//! provisioned once `spec.controlPlaneEndpoint` has a host and a port; its failure domains are those
//! of `spec.failureDomains` (the v1beta2 list, or the v1beta1 map by name).

use crate::Metal3Error;
use capstan_infra::{ClusterProvisioned, FailureDomain, InfraClusterProvider, Progress};
use capstan_model::capi::v1beta2::Cluster;
use capstan_model::capm3::v1beta2::Metal3Cluster;
use capstan_runtime::Context;
use serde_json::Value;
use std::collections::BTreeMap;

/// The Metal3Cluster controller's name.
pub const CLUSTER_CONTROLLER: &str = "metal3cluster";
/// The Metal3Cluster finalizer.
pub const CLUSTER_FINALIZER: &str = "metal3cluster.infrastructure.cluster.x-k8s.io";

/// The Metal3Cluster side of the Metal3 provider.
#[derive(Clone, Debug, Default)]
pub struct Metal3ClusterProvider;

/// Failure domains from `spec.failureDomains` in either version's shape.
pub fn failure_domains(spec: Option<&Value>) -> Vec<FailureDomain> {
    let attributes = |v: &Value| -> BTreeMap<String, String> {
        v["attributes"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut domains: Vec<FailureDomain> = match spec {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|d| {
                Some(FailureDomain {
                    name: d["name"].as_str()?.to_owned(),
                    control_plane: d["controlPlane"].as_bool().unwrap_or(false),
                    attributes: attributes(d),
                })
            })
            .collect(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, d)| FailureDomain {
                name: name.clone(),
                control_plane: d["controlPlane"].as_bool().unwrap_or(false),
                attributes: attributes(d),
            })
            .collect(),
        _ => Vec::new(),
    };
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    domains
}

impl InfraClusterProvider for Metal3ClusterProvider {
    type Cluster = Metal3Cluster;
    type Error = Metal3Error;

    fn name(&self) -> &'static str {
        CLUSTER_CONTROLLER
    }

    fn finalizer(&self) -> &'static str {
        CLUSTER_FINALIZER
    }

    async fn ensure(
        &self,
        cluster: &Metal3Cluster,
        _owner: &Cluster,
        _context: &Context,
    ) -> Result<Progress<ClusterProvisioned>, Metal3Error> {
        let endpoint = cluster.spec.control_plane_endpoint.as_ref();
        if endpoint.is_none_or(|e| e.host.is_empty() || e.port <= 0) {
            return Ok(Progress::waiting(
                "WaitingForControlPlaneEndpoint",
                "spec.controlPlaneEndpoint needs a host and a port: set them to the API VIP (e.g. the address kube-vip serves) and 6443",
            ));
        }
        Ok(Progress::Done(ClusterProvisioned {
            control_plane_endpoint: None,
            failure_domains: failure_domains(cluster.spec.failure_domains.as_ref()),
        }))
    }

    async fn release(
        &self,
        _cluster: &Metal3Cluster,
        _context: &Context,
    ) -> Result<Progress<()>, Metal3Error> {
        Ok(Progress::Done(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failure_domains_from_either_shape() {
        let list = json!([{"name": "b", "controlPlane": true}, {"name": "a", "attributes": {"rack": "1"}}]);
        let map = json!({"b": {"controlPlane": true}, "a": {"attributes": {"rack": "1"}}});
        for spec in [list, map] {
            let domains = failure_domains(Some(&spec));
            assert_eq!(domains.len(), 2);
            assert_eq!(domains[0].name, "a");
            assert_eq!(
                domains[0].attributes.get("rack").map(String::as_str),
                Some("1")
            );
            assert!(domains[1].control_plane && !domains[0].control_plane);
        }
        assert!(failure_domains(None).is_empty());
    }
}
