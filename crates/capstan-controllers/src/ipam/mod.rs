//! Metal3 IP address management (`ipam.metal3.io/v1alpha1`): IPClaims get addresses from IPPools.
//!
//! Two controllers share the work, each the only writer of what it owns:
//! - **ipam-claim** reconciles IPClaims. It finds the claim's IPAddress, or allocates the lowest
//!   free address of the pool (see [`allocate`]) and creates one, owned by the claim and the pool
//!   and labelled with both; then it points `status.address` at it, or writes `status.errorMessage`
//!   (and an Event) when the pool is missing, misconfigured or exhausted. Its finalizer
//!   (`ipclaim.ipam.metal3.io`) releases the address when the claim is deleted. Claims are also
//!   reconciled when their pool changes, so a claim waiting on a full pool gets an address once the
//!   pool grows or another claim lets one go.
//! - **ipam-pool** reconciles IPPools: `status.indexes` (claim → address) is recomputed from the
//!   pool's IPAddress objects whenever they change.
//!
//! Two claims can never hold one address: the IPAddress name is derived from the address, so the
//! API server refuses the second create with a conflict, and the losing claim is requeued. Within
//! one process, claims of one pool are additionally allocated one at a time, which keeps such
//! conflicts rare.
//!
//! Deviations from Metal3's ip-address-manager: a claim must be in its pool's namespace; a claim in
//! error is retried whenever it or its pool changes (Metal3 waits for the error to be cleared); the
//! address is released on claim deletion even if other finalizers remain; there is no IPPool
//! finalizer and no `ipAddress` annotation.

pub mod allocate;

use allocate::{AllocationError, Taken};
use capstan_model::ipam::{IPAddress, IPClaim, IPPool, IpAddressSpec, IpClaimStatus};
use capstan_model::meta::{LABEL_CLUSTER_NAME, ObjectReference};
use capstan_runtime::{Action, Cleanup, Context, EventType, Reconciler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Finalizer of IPClaims: the address is released before the claim goes.
pub const CLAIM_FINALIZER: &str = "ipclaim.ipam.metal3.io";
/// Finalizer of IPAddresses: only the claim's release deletes them.
pub const ADDRESS_FINALIZER: &str = "ipaddress.ipam.metal3.io";
/// Label on IPAddresses naming their pool.
pub const LABEL_POOL: &str = "ipam.metal3.io/pool-name";
/// Label on IPAddresses naming their claim.
pub const LABEL_CLAIM: &str = "ipam.metal3.io/claim-name";
/// Name of the claim controller.
pub const CLAIM_CONTROLLER: &str = "ipam-claim";
/// Name of the pool controller.
pub const POOL_CONTROLLER: &str = "ipam-pool";

/// Reconciles everything again after this long without a change, in case a watch event was lost.
const RESYNC: Duration = Duration::from_secs(600);

/// Why an IPAM reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("IPAddress {namespace}/{name} was created by a concurrent allocation")]
    AddressTaken { namespace: String, name: String },
    #[error("{kind} {name} has no namespace")]
    NoNamespace { kind: &'static str, name: String },
    #[error("{kind} {namespace}/{name} has no uid")]
    NoUid {
        kind: &'static str,
        namespace: String,
        name: String,
    },
}

fn api_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> IpamError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| IpamError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

fn is_status(err: &kube::Error, check: fn(&kube::core::Status) -> bool) -> bool {
    matches!(err, kube::Error::Api(status) if check(status))
}

/// Serialises allocations from one pool within this process (correctness does not depend on it —
/// the API's name conflicts do — but it spares claims of one pool from racing each other).
#[derive(Clone, Debug, Default)]
pub struct PoolLocks {
    locks: Arc<Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A pool by namespace and name.
type PoolKey = (String, String);

impl PoolLocks {
    async fn lock(&self, namespace: &str, pool: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks
                .entry((namespace.to_owned(), pool.to_owned()))
                .or_default()
                .clone()
        };
        lock.lock_owned().await
    }
}

fn namespace_of<K: Resource>(object: &K, kind: &'static str) -> Result<String, IpamError> {
    object
        .meta()
        .namespace
        .clone()
        .ok_or_else(|| IpamError::NoNamespace {
            kind,
            name: object.meta().name.clone().unwrap_or_default(),
        })
}

fn owner_reference<K: Resource<DynamicType = ()>>(
    object: &K,
    kind: &'static str,
    namespace: &str,
) -> Result<OwnerReference, IpamError> {
    let name = object.meta().name.clone().unwrap_or_default();
    let uid = object.meta().uid.clone().ok_or_else(|| IpamError::NoUid {
        kind,
        namespace: namespace.to_owned(),
        name: name.clone(),
    })?;
    Ok(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name,
        uid,
        controller: None,
        block_owner_deletion: None,
    })
}

/// Whether `address` was allocated from pool `pool` to claim `claim`.
fn belongs_to(address: &IPAddress, pool: &str, claim: &str) -> bool {
    address.spec.pool.name.as_deref() == Some(pool)
        && address.spec.claim.name.as_deref() == Some(claim)
}

fn parsed(address: &IPAddress) -> Option<IpAddr> {
    address.spec.address.trim().parse().ok()
}

/// Removes the address finalizer (capstan-runtime's one way: a JSON patch testing the list as read)
/// and deletes the IPAddress (with a uid precondition), tolerating that it is already gone.
async fn release(api: &Api<IPAddress>, address: &IPAddress) -> Result<(), IpamError> {
    let name = address.name_any();
    let namespace = address.meta().namespace.clone().unwrap_or_default();
    capstan_runtime::finalizers::remove(api, address, ADDRESS_FINALIZER)
        .await
        .map_err(api_error("updating", "IPAddress", &namespace, &name))?;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: address.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, kube::core::Status::is_not_found) => Ok(()),
        Err(e) => Err(api_error("deleting", "IPAddress", &namespace, &name)(e)),
    }
}

/// What a claim reconcile decided, before status is written.
enum Outcome {
    /// The claim holds this IPAddress; `new` when it was created just now.
    Holds { address: Box<IPAddress>, new: bool },
    /// The claim cannot get an address; the reason is user-facing.
    Fails {
        reason: &'static str,
        message: String,
    },
}

/// The IPClaim controller.
#[derive(Clone, Debug, Default)]
pub struct ClaimController {
    locks: PoolLocks,
}

impl ClaimController {
    /// A claim controller with its own pool locks.
    pub fn new() -> Self {
        Self::default()
    }

    async fn decide(
        &self,
        claim: &IPClaim,
        namespace: &str,
        client: &Client,
    ) -> Result<Outcome, IpamError> {
        let name = claim.name_any();
        let pool_name = claim.spec.pool.name.clone().unwrap_or_default();
        if pool_name.is_empty() {
            return Ok(Outcome::Fails {
                reason: "InvalidClaim",
                message: "spec.pool.name is empty".into(),
            });
        }
        if claim
            .spec
            .pool
            .namespace
            .as_deref()
            .is_some_and(|ns| !ns.is_empty() && ns != namespace)
        {
            return Ok(Outcome::Fails {
                reason: "InvalidClaim",
                message: format!("IPPool {pool_name} must be in the claim's namespace {namespace}"),
            });
        }
        let _allocating = self.locks.lock(namespace, &pool_name).await;
        let addresses: Api<IPAddress> = Api::namespaced(client.clone(), namespace);
        let existing = addresses
            .list(&ListParams::default())
            .await
            .map_err(api_error("listing", "IPAddress", namespace, ""))?
            .items;
        let mut mine: Vec<&IPAddress> = existing
            .iter()
            .filter(|a| belongs_to(a, &pool_name, &name))
            .collect();
        if !mine.is_empty() {
            // Normally one. More only after concurrent allocations raced a release: keep the one
            // the status names (else the lowest) and give the others back.
            let current = claim
                .status
                .as_ref()
                .and_then(|s| s.address.as_ref())
                .and_then(|a| a.name.clone());
            mine.sort_by_key(|a| (Some(a.name_any()) != current, parsed(a)));
            for extra in &mine[1..] {
                release(&addresses, extra).await?;
            }
            return Ok(Outcome::Holds {
                address: Box::new(mine[0].clone()),
                new: false,
            });
        }

        let pools: Api<IPPool> = Api::namespaced(client.clone(), namespace);
        let Some(pool) = pools
            .get_opt(&pool_name)
            .await
            .map_err(api_error("reading", "IPPool", namespace, &pool_name))?
        else {
            return Ok(Outcome::Fails {
                reason: "PoolNotFound",
                message: format!("IPPool {pool_name} not found"),
            });
        };
        let taken = Taken {
            addresses: existing
                .iter()
                .filter(|a| a.spec.pool.name.as_deref() == Some(pool_name.as_str()))
                .filter_map(parsed)
                .collect(),
            names: existing.iter().map(ResourceExt::name_any).collect(),
        };
        let allocation = match allocate::allocate(&pool.spec, &pool_name, &name, &taken) {
            Ok(allocation) => allocation,
            Err(err) => {
                let reason = match err {
                    AllocationError::Exhausted => "PoolExhausted",
                    _ => "AllocationFailed",
                };
                return Ok(Outcome::Fails {
                    reason,
                    message: err.to_string(),
                });
            }
        };
        let address_name =
            allocate::address_name(&pool.spec.name_prefix, &pool_name, allocation.address);
        let mut labels: BTreeMap<String, String> = claim.labels().clone();
        labels.insert(LABEL_POOL.into(), pool_name.clone());
        labels.insert(LABEL_CLAIM.into(), name.clone());
        let reference = |name: &str| ObjectReference {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectReference::default()
        };
        let mut address = IPAddress::new(
            address_name.clone(),
            Some(namespace),
            IpAddressSpec {
                address: allocation.address.to_string(),
                pool: reference(&pool_name),
                claim: reference(&name),
                prefix: allocation.prefix,
                gateway: allocation.gateway,
                dns_servers: allocation.dns_servers,
            },
        );
        address.metadata = ObjectMeta {
            labels: Some(labels),
            finalizers: Some(vec![ADDRESS_FINALIZER.to_owned()]),
            owner_references: Some(vec![
                owner_reference(&pool, "IPPool", namespace)?,
                owner_reference(claim, "IPClaim", namespace)?,
            ]),
            ..address.metadata
        };
        match addresses.create(&PostParams::default(), &address).await {
            Ok(created) => Ok(Outcome::Holds {
                address: Box::new(created),
                new: true,
            }),
            Err(e) if is_status(&e, kube::core::Status::is_already_exists) => {
                Err(IpamError::AddressTaken {
                    namespace: namespace.to_owned(),
                    name: address_name,
                })
            }
            Err(e) => Err(api_error("creating", "IPAddress", namespace, &address_name)(e)),
        }
    }
}

impl Reconciler for ClaimController {
    type Object = IPClaim;
    type Error = IpamError;

    fn name(&self) -> &'static str {
        CLAIM_CONTROLLER
    }

    fn concurrency(&self) -> u16 {
        4
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(CLAIM_FINALIZER)
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn configure(&self, controller: Controller<IPClaim>, client: &Client) -> Controller<IPClaim> {
        let claims = controller.store();
        controller
            .owns(
                Api::<IPAddress>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<IPPool>::all(client.clone()),
                watcher::Config::default(),
                move |pool: IPPool| {
                    // A pool change matters to the claims still waiting for an address.
                    claims
                        .state()
                        .into_iter()
                        .filter(|c| {
                            c.metadata.namespace == pool.metadata.namespace
                                && c.spec.pool.name == pool.metadata.name
                                && c.status.as_ref().is_none_or(|s| {
                                    s.address.is_none() || s.error_message.is_some()
                                })
                        })
                        .map(|c| ObjectRef::from_obj(&*c))
                        .collect::<Vec<_>>()
                },
            )
    }

    async fn reconcile(
        &self,
        claim: Arc<IPClaim>,
        context: Arc<Context>,
    ) -> Result<Action, IpamError> {
        let namespace = namespace_of(&*claim, "IPClaim")?;
        let name = claim.name_any();
        let outcome = self.decide(&claim, &namespace, context.client()).await?;
        let status = match &outcome {
            Outcome::Holds { address, .. } => IpClaimStatus {
                address: Some(ObjectReference {
                    name: Some(address.name_any()),
                    namespace: Some(namespace.clone()),
                    ..ObjectReference::default()
                }),
                error_message: None,
            },
            Outcome::Fails { message, .. } => IpClaimStatus {
                address: None,
                error_message: Some(message.clone()),
            },
        };
        let current = claim.status.clone().unwrap_or_default();
        if status != current {
            let claims: Api<IPClaim> = Api::namespaced(context.client().clone(), &namespace);
            let patch = json!({"status": {
                "address": status.address,
                "errorMessage": status.error_message,
            }});
            claims
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "updating status of",
                    "IPClaim",
                    &namespace,
                    &name,
                ))?;
            match &outcome {
                Outcome::Holds { address, new: true } => {
                    let note = format!(
                        "allocated {} (IPAddress {}) from IPPool {}",
                        address.spec.address,
                        address.name_any(),
                        address.spec.pool.name.as_deref().unwrap_or_default()
                    );
                    context
                        .publish(
                            &*claim,
                            EventType::Normal,
                            "AddressAllocated",
                            "Allocate",
                            note,
                        )
                        .await;
                }
                Outcome::Holds { .. } => {}
                Outcome::Fails { reason, message } => {
                    context
                        .publish(
                            &*claim,
                            EventType::Warning,
                            reason,
                            "Allocate",
                            message.clone(),
                        )
                        .await;
                }
            }
        }
        Ok(Action::requeue(RESYNC))
    }

    async fn cleanup(
        &self,
        claim: Arc<IPClaim>,
        context: Arc<Context>,
    ) -> Result<Cleanup, IpamError> {
        let namespace = namespace_of(&*claim, "IPClaim")?;
        let name = claim.name_any();
        let pool_name = claim.spec.pool.name.clone().unwrap_or_default();
        let _allocating = self.locks.lock(&namespace, &pool_name).await;
        let addresses: Api<IPAddress> = Api::namespaced(context.client().clone(), &namespace);
        let held: Vec<IPAddress> = addresses
            .list(&ListParams::default())
            .await
            .map_err(api_error("listing", "IPAddress", &namespace, ""))?
            .items
            .into_iter()
            .filter(|a| belongs_to(a, &pool_name, &name))
            .collect();
        for address in &held {
            release(&addresses, address).await?;
        }
        if !held.is_empty() {
            let released: Vec<&str> = held.iter().map(|a| a.spec.address.as_str()).collect();
            context
                .publish(
                    &*claim,
                    EventType::Normal,
                    "AddressReleased",
                    "Release",
                    format!("released {} to IPPool {pool_name}", released.join(", ")),
                )
                .await;
        }
        Ok(Cleanup::Done)
    }
}

/// The IPPool controller.
#[derive(Clone, Debug, Default)]
pub struct PoolController;

impl Reconciler for PoolController {
    type Object = IPPool;
    type Error = IpamError;

    fn name(&self) -> &'static str {
        POOL_CONTROLLER
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn cluster_name(&self, pool: &IPPool) -> Option<String> {
        pool.spec
            .cluster_name
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| pool.labels().get(LABEL_CLUSTER_NAME).cloned())
    }

    fn configure(&self, controller: Controller<IPPool>, client: &Client) -> Controller<IPPool> {
        controller.owns(
            Api::<IPAddress>::all(client.clone()),
            watcher::Config::default(),
        )
    }

    async fn reconcile(
        &self,
        pool: Arc<IPPool>,
        context: Arc<Context>,
    ) -> Result<Action, IpamError> {
        let namespace = namespace_of(&*pool, "IPPool")?;
        let name = pool.name_any();
        let addresses: Api<IPAddress> = Api::namespaced(context.client().clone(), &namespace);
        let indexes: BTreeMap<String, String> = addresses
            .list(&ListParams::default())
            .await
            .map_err(api_error("listing", "IPAddress", &namespace, ""))?
            .items
            .into_iter()
            .filter(|a| a.spec.pool.name.as_deref() == Some(name.as_str()))
            .filter_map(|a| Some((a.spec.claim.name.clone()?, a.spec.address.clone())))
            .collect();
        let current = pool
            .status
            .as_ref()
            .and_then(|s| s.indexes.clone())
            .unwrap_or_default();
        if indexes != current {
            let now = capstan_runtime::conditions::now();
            // JSON patch so that released claims disappear from the map (a merge patch would keep
            // keys it does not name); it fails, and is retried, if the cached pool was stale about
            // whether status exists.
            let patch: json_patch::Patch = serde_json::from_value(if pool.status.is_some() {
                json!([
                    {"op": "add", "path": "/status/indexes", "value": indexes},
                    {"op": "add", "path": "/status/lastUpdated", "value": now},
                ])
            } else {
                json!([{"op": "add", "path": "/status", "value": {"indexes": indexes, "lastUpdated": now}}])
            })
            .map_err(|e| IpamError::Api {
                verb: "building the status patch of",
                kind: "IPPool",
                namespace: namespace.clone(),
                name: name.clone(),
                source: Box::new(kube::Error::SerdeError(e)),
            })?;
            let pools: Api<IPPool> = Api::namespaced(context.client().clone(), &namespace);
            pools
                .patch_status(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .map_err(api_error("updating status of", "IPPool", &namespace, &name))?;
        }
        Ok(Action::requeue(RESYNC))
    }
}
