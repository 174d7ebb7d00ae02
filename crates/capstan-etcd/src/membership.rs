//! [`KubeadmEtcd`]: the etcd membership of real kubeadm clusters, the [`EtcdMembership`] the
//! KubeadmControlPlane uses whenever capstan does not play the cluster itself.
//!
//! How it reaches etcd, step by step, on every call (membership changes rarely and every answer
//! must be current, so nothing but the client certificate is cached):
//!
//! 1. **Identity.** The cluster's etcd CA is the Secret `<cluster>-etcd` (`tls.crt`, `tls.key`) in
//!    the management cluster, the same key pair capstan's bootstrap data put on every control-plane
//!    node. A client certificate signed by it (`CN=capstan-etcd-client`) is issued once per CA and
//!    kept while the Secret's resourceVersion is unchanged; kubeadm's etcd trusts any certificate
//!    of its CA (`--client-cert-auth`), exactly as it trusts the API server's.
//! 2. **Endpoints.** kubeadm annotates each etcd static Pod with the URL it serves clients on
//!    (`kubeadm.kubernetes.io/etcd.advertise-client-urls`), as kubeadm itself finds etcd; those
//!    Pods are read from the workload API (`kube-system`, `component=etcd`). Before the mirror Pods
//!    exist, the control-plane Nodes' InternalIPs on port 2379 stand in.
//! 3. **Members.** The member list comes from the first endpoint that answers; then each member is
//!    asked for its own status on its own client URL. A member is healthy when it answers, reports
//!    no errors, is no learner and raises no alarm (`NOSPACE`, `CORRUPT`); the leader is the one the
//!    answering members name.
//!
//! Removal is by the member's name (kubeadm names each member after its Node) and idempotent: a
//! member already gone is success. Moving leadership goes to the current leader, which is the only
//! member that accepts it.
//!
//! The management plane dials the members directly, so it must reach the control-plane nodes' etcd
//! port (2379), as it reaches their BMCs and API servers on the provisioning network.

use crate::gateway::{Endpoint, Gateway, GatewayError, Identity, Status};
use capstan_kubeadm::certs::{self, CertError, Purpose};
use capstan_runtime::controller::ErrorChain;
use capstan_workload::{
    ClusterKey, EtcdMember, EtcdMembership, SharedWorkloadAccess, WorkloadError,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::sync::Mutex;

/// The annotation kubeadm puts on each etcd static Pod: the member's client URL.
pub const ANNOTATION_ADVERTISE_CLIENT_URLS: &str =
    "kubeadm.kubernetes.io/etcd.advertise-client-urls";
/// The label of kubeadm's etcd static Pods.
pub const ETCD_POD_SELECTOR: &str = "component=etcd,tier=control-plane";
/// The label of control-plane Nodes.
pub const CONTROL_PLANE_NODE_SELECTOR: &str = "node-role.kubernetes.io/control-plane";
/// etcd's client port in kubeadm clusters.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// The common name of the client certificate capstan presents to etcd.
pub const CLIENT_COMMON_NAME: &str = "capstan-etcd-client";

/// Why the etcd of a cluster could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("reading Secret {namespace}/{secret} (the etcd CA)")]
    ReadCa {
        namespace: String,
        secret: String,
        source: kube::Error,
    },
    #[error("Secret {namespace}/{secret} (the etcd CA) does not exist")]
    NoCa { namespace: String, secret: String },
    #[error("the etcd CA")]
    Ca(#[source] CertError),
    #[error("the etcd client identity")]
    Identity(#[source] GatewayError),
    #[error("listing the etcd Pods and control-plane Nodes of the workload cluster")]
    Discover(#[source] kube::Error),
    #[error(
        "no etcd endpoint found: no etcd Pod in kube-system carries {ANNOTATION_ADVERTISE_CLIENT_URLS} and no control-plane Node has an InternalIP"
    )]
    NoEndpoints,
    #[error("no etcd endpoint answered the member list (tried {tried})")]
    NoAnswer {
        tried: String,
        #[source]
        last: GatewayError,
    },
    #[error("no etcd member is called {name}")]
    NoSuchMember { name: String },
    #[error("no member answered as the etcd leader")]
    NoLeader,
    #[error(
        "etcd refuses membership changes until the member asked has been connected to every other member for 5 seconds (its strict reconfiguration check, after a start or a leader change); the removal is retried"
    )]
    NotYetReconfigurable(#[source] GatewayError),
    #[error("etcd refused")]
    Gateway(#[source] GatewayError),
}

/// The gRPC code etcd answers a membership change with while its strict reconfiguration check
/// fails (`etcdserver: unhealthy cluster`, `etcdserver: re-configuration failed due to not enough
/// started members`).
const RPC_UNAVAILABLE: i64 = 14;

impl MembershipError {
    /// A refused removal, told apart by why etcd refused it.
    fn removal(err: GatewayError) -> Self {
        match &err {
            GatewayError::Rpc { code, .. } if *code == RPC_UNAVAILABLE => {
                Self::NotYetReconfigurable(err)
            }
            _ => Self::Gateway(err),
        }
    }
}

struct CachedIdentity {
    ca_version: Option<String>,
    identity: Identity,
}

/// The real etcd membership: management-cluster Secrets for the identity, the workload API for the
/// endpoints, etcd's JSON gateway for the members.
pub struct KubeadmEtcd {
    management: Client,
    workloads: SharedWorkloadAccess,
    identities: Mutex<HashMap<ClusterKey, CachedIdentity>>,
}

/// One member as the control plane needs it: what the list says and what it says of itself.
struct Observed {
    member: crate::gateway::Member,
    status: Option<Status>,
}

impl KubeadmEtcd {
    pub fn new(management: Client, workloads: SharedWorkloadAccess) -> Self {
        Self {
            management,
            workloads,
            identities: Mutex::new(HashMap::new()),
        }
    }

    /// The client identity for `cluster`'s etcd, issued afresh when its CA Secret changed.
    async fn identity(&self, cluster: &ClusterKey) -> Result<Identity, MembershipError> {
        let secret_name = Purpose::EtcdCa.secret_name(&cluster.name);
        let secret = Api::<Secret>::namespaced(self.management.clone(), &cluster.namespace)
            .get_opt(&secret_name)
            .await
            .map_err(|source| MembershipError::ReadCa {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
                source,
            })?
            .ok_or_else(|| MembershipError::NoCa {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
            })?;
        let version = secret.resource_version();
        if let Ok(cache) = self.identities.lock()
            && let Some(cached) = cache.get(cluster)
            && cached.ca_version == version
        {
            return Ok(cached.identity.clone());
        }
        let ca = certs::key_material(&secret, &cluster.namespace).map_err(MembershipError::Ca)?;
        let client = certs::client_certificate(&ca, CLIENT_COMMON_NAME, None)
            .map_err(MembershipError::Ca)?;
        let identity = Identity::new(&ca.cert, &client.cert, &client.key)
            .map_err(MembershipError::Identity)?;
        if let Ok(mut cache) = self.identities.lock() {
            cache.insert(
                cluster.clone(),
                CachedIdentity {
                    ca_version: version,
                    identity: identity.clone(),
                },
            );
        }
        Ok(identity)
    }

    /// Where the members serve clients, from the workload cluster.
    async fn endpoints(&self, cluster: &ClusterKey) -> Result<Vec<Endpoint>, Failure> {
        let client = self
            .workloads
            .client(cluster)
            .await
            .map_err(Failure::Workload)?;
        let pods = Api::<Pod>::namespaced(client.clone(), "kube-system")
            .list(&ListParams::default().labels(ETCD_POD_SELECTOR))
            .await
            .map_err(|err| Failure::Etcd(MembershipError::Discover(err)))?;
        let mut endpoints = endpoints_of_pods(&pods.items);
        if endpoints.is_empty() {
            let nodes = Api::<Node>::all(client)
                .list(&ListParams::default().labels(CONTROL_PLANE_NODE_SELECTOR))
                .await
                .map_err(|err| Failure::Etcd(MembershipError::Discover(err)))?;
            endpoints = endpoints_of_nodes(&nodes.items);
        }
        if endpoints.is_empty() {
            return Err(Failure::Etcd(MembershipError::NoEndpoints));
        }
        Ok(endpoints)
    }

    /// The member list from the first endpoint that answers, with the gateway that answered.
    async fn list(
        &self,
        cluster: &ClusterKey,
    ) -> Result<(Identity, Gateway, Vec<crate::gateway::Member>), Failure> {
        let identity = self.identity(cluster).await.map_err(Failure::Etcd)?;
        let endpoints = self.endpoints(cluster).await?;
        let mut last = None;
        for endpoint in &endpoints {
            let gateway = Gateway::new(endpoint.clone(), identity.clone());
            match gateway.member_list().await {
                Ok(members) => return Ok((identity, gateway, members)),
                Err(err) => {
                    tracing::debug!(cluster = %cluster, endpoint = %endpoint, error = %err, "etcd endpoint did not answer the member list");
                    last = Some(err);
                }
            }
        }
        let tried = endpoints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        match last {
            Some(last) => Err(Failure::Etcd(MembershipError::NoAnswer { tried, last })),
            None => Err(Failure::Etcd(MembershipError::NoEndpoints)),
        }
    }

    /// Each member with its own status (none when it did not answer on its client URL).
    async fn observe(
        &self,
        cluster: &ClusterKey,
    ) -> Result<(Identity, Gateway, Vec<Observed>, Vec<crate::gateway::Alarm>), Failure> {
        let (identity, gateway, members) = self.list(cluster).await?;
        let statuses = futures::future::join_all(members.iter().map(|member| {
            let identity = identity.clone();
            async move {
                let endpoint = member
                    .client_urls
                    .iter()
                    .find_map(|url| Endpoint::parse(url).ok())?;
                Gateway::new(endpoint, identity).status().await.ok()
            }
        }))
        .await;
        let alarms = gateway
            .alarms()
            .await
            .map_err(|err| Failure::Etcd(MembershipError::Gateway(err)))?;
        let observed = members
            .into_iter()
            .zip(statuses)
            .map(|(member, status)| Observed { member, status })
            .collect();
        Ok((identity, gateway, observed, alarms))
    }
}

/// A failure of one call: the workload API (its own error kinds), or etcd.
enum Failure {
    Workload(WorkloadError),
    Etcd(MembershipError),
}

impl Failure {
    fn into_workload(self, cluster: &ClusterKey) -> WorkloadError {
        match self {
            Self::Workload(err) => err,
            Self::Etcd(err) => WorkloadError::Other {
                cluster: cluster.clone(),
                // The whole chain: this text ends up in the control plane's conditions.
                reason: ErrorChain(&err).to_string(),
            },
        }
    }
}

/// Client URLs from kubeadm's annotation on etcd static Pods, in Pod name order.
fn endpoints_of_pods(pods: &[Pod]) -> Vec<Endpoint> {
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by_key(|pod| pod.name_any());
    pods.iter()
        .filter_map(|pod| pod.annotations().get(ANNOTATION_ADVERTISE_CLIENT_URLS))
        .flat_map(|urls| urls.split(','))
        .filter_map(|url| Endpoint::parse(url.trim()).ok())
        .collect()
}

/// `https://<InternalIP>:2379` of each control-plane Node, in Node name order.
fn endpoints_of_nodes(nodes: &[Node]) -> Vec<Endpoint> {
    let mut nodes: Vec<&Node> = nodes.iter().collect();
    nodes.sort_by_key(|node| node.name_any());
    nodes
        .iter()
        .filter_map(|node| {
            node.status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .find(|address| address.type_ == "InternalIP")
        })
        .map(|address| Endpoint {
            host: address.address.clone(),
            port: ETCD_CLIENT_PORT,
        })
        .collect()
}

/// The members as the control plane sees them: healthy when it answered for itself without errors,
/// is a voting member and raised no alarm; the leader as the answering members name it.
fn summarise(observed: &[Observed], alarms: &[crate::gateway::Alarm]) -> Vec<EtcdMember> {
    let leader = observed
        .iter()
        .filter_map(|o| o.status.as_ref())
        .map(|status| status.leader)
        .find(|&leader| leader != 0);
    observed
        .iter()
        .map(|o| {
            let alarmed = alarms.iter().any(|alarm| alarm.member_id == o.member.id);
            let answered_cleanly = o
                .status
                .as_ref()
                .is_some_and(|status| status.errors.is_empty() && !status.is_learner);
            EtcdMember {
                name: o.member.name.clone(),
                id: o.member.id,
                healthy: answered_cleanly && !o.member.is_learner && !alarmed,
                leader: leader == Some(o.member.id),
            }
        })
        .collect()
}

impl EtcdMembership for KubeadmEtcd {
    fn members<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Vec<EtcdMember>, WorkloadError>> {
        Box::pin(async move {
            let (_, _, observed, alarms) = self
                .observe(cluster)
                .await
                .map_err(|failure| failure.into_workload(cluster))?;
            Ok(summarise(&observed, &alarms))
        })
    }

    fn remove_member<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let (identity, answering, members) = self
                .list(cluster)
                .await
                .map_err(|failure| failure.into_workload(cluster))?;
            let Some(leaving) = members.iter().find(|m| m.name == name) else {
                return Ok(());
            };
            // Ask a member that stays: the one leaving may be the very one that answered.
            let staying = members
                .iter()
                .filter(|m| m.id != leaving.id)
                .find_map(|m| {
                    m.client_urls
                        .iter()
                        .find_map(|url| Endpoint::parse(url).ok())
                })
                .map(|endpoint| Gateway::new(endpoint, identity.clone()))
                .unwrap_or(answering);
            match staying.remove_member(leaving.id).await {
                Ok(()) => Ok(()),
                Err(err) if err.is_not_found() => Ok(()),
                Err(err) => {
                    Err(Failure::Etcd(MembershipError::removal(err)).into_workload(cluster))
                }
            }
        })
    }

    fn move_leader<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let fail = |err: MembershipError| Failure::Etcd(err).into_workload(cluster);
            let (identity, _, observed, _) = self
                .observe(cluster)
                .await
                .map_err(|failure| failure.into_workload(cluster))?;
            let target = observed
                .iter()
                .find(|o| o.member.name == to)
                .ok_or_else(|| {
                    fail(MembershipError::NoSuchMember {
                        name: to.to_owned(),
                    })
                })?;
            let leader_id = observed
                .iter()
                .filter_map(|o| o.status.as_ref())
                .map(|status| status.leader)
                .find(|&leader| leader != 0)
                .ok_or_else(|| fail(MembershipError::NoLeader))?;
            if leader_id == target.member.id {
                return Ok(());
            }
            let leader = observed
                .iter()
                .find(|o| o.member.id == leader_id)
                .and_then(|o| {
                    o.member
                        .client_urls
                        .iter()
                        .find_map(|url| Endpoint::parse(url).ok())
                })
                .ok_or_else(|| fail(MembershipError::NoLeader))?;
            Gateway::new(leader, identity)
                .move_leader(target.member.id)
                .await
                .map_err(|err| fail(MembershipError::Gateway(err)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{Alarm, Header, Member};
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn member(id: u64, name: &str) -> Member {
        Member {
            id,
            name: name.to_owned(),
            peer_urls: Vec::new(),
            client_urls: vec![format!("https://10.0.0.{id}:2379")],
            is_learner: false,
        }
    }

    fn status(id: u64, leader: u64, errors: &[&str]) -> Status {
        Status {
            header: Header {
                cluster_id: 1,
                member_id: id,
            },
            version: "3.6.6".into(),
            leader,
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            is_learner: false,
        }
    }

    #[test]
    fn members_are_healthy_only_when_they_answer_cleanly() {
        struct Case {
            what: &'static str,
            status: Option<Status>,
            learner: bool,
            alarm: Option<&'static str>,
            healthy: bool,
        }
        let cases = [
            Case {
                what: "answers, no errors",
                status: Some(status(2, 1, &[])),
                learner: false,
                alarm: None,
                healthy: true,
            },
            Case {
                what: "does not answer",
                status: None,
                learner: false,
                alarm: None,
                healthy: false,
            },
            Case {
                what: "reports an error",
                status: Some(status(2, 1, &["slow apply"])),
                learner: false,
                alarm: None,
                healthy: false,
            },
            Case {
                what: "is a learner",
                status: Some(status(2, 1, &[])),
                learner: true,
                alarm: None,
                healthy: false,
            },
            Case {
                what: "raised NOSPACE",
                status: Some(status(2, 1, &[])),
                learner: false,
                alarm: Some("NOSPACE"),
                healthy: false,
            },
        ];
        for case in cases {
            let mut second = member(2, "cp-1");
            second.is_learner = case.learner;
            let observed = [
                Observed {
                    member: member(1, "cp-0"),
                    status: Some(status(1, 1, &[])),
                },
                Observed {
                    member: second,
                    status: case.status,
                },
            ];
            let alarms: Vec<Alarm> = case
                .alarm
                .map(|alarm| Alarm {
                    member_id: 2,
                    alarm: alarm.into(),
                })
                .into_iter()
                .collect();
            let members = summarise(&observed, &alarms);
            assert!(members[0].healthy && members[0].leader, "{}", case.what);
            assert_eq!(members[1].healthy, case.healthy, "{}", case.what);
            assert!(!members[1].leader, "{}", case.what);
        }
    }

    #[test]
    fn no_leader_when_no_member_names_one() {
        let observed = [Observed {
            member: member(1, "cp-0"),
            status: Some(status(1, 0, &[])),
        }];
        assert!(!summarise(&observed, &[])[0].leader);
    }

    #[test]
    fn endpoints_come_from_pod_annotations_then_node_addresses() {
        let pod = |name: &str, urls: Option<&str>| Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                annotations: urls.map(|u| {
                    BTreeMap::from([(ANNOTATION_ADVERTISE_CLIENT_URLS.to_owned(), u.to_owned())])
                }),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let pods = [
            pod("etcd-cp-1", Some("https://10.0.0.6:2379")),
            pod("etcd-cp-0", Some("https://10.0.0.5:2379")),
            pod("etcd-cp-2", None),
            pod("etcd-cp-3", Some("http://10.0.0.8:2379")),
        ];
        let hosts: Vec<_> = endpoints_of_pods(&pods)
            .into_iter()
            .map(|e| e.host)
            .collect();
        assert_eq!(hosts, ["10.0.0.5", "10.0.0.6"]);

        let node = |name: &str, ip: &str| Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: name.into(),
                    },
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: ip.into(),
                    },
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        let endpoints = endpoints_of_nodes(&[
            node("cp-1", "10.0.0.6"),
            node("cp-0", "10.0.0.5"),
            Node::default(),
        ]);
        assert_eq!(
            endpoints
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["https://10.0.0.5:2379", "https://10.0.0.6:2379"]
        );
    }
}
