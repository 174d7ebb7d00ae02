//! Applying documents into a workload cluster: discovery finds each document's resource (plural,
//! scope), then a server-side apply creates or updates it.
//!
//! Every document is tried, whatever happened to the ones before it, and each gets its own
//! [`DocumentOutcome`]: a manifest with one kind the workload API does not serve yet still lands
//! everything else, and the failure names the document and why.

use crate::resources::Document;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use std::collections::HashMap;

/// The field manager of everything a ClusterResourceSet applies.
pub const FIELD_MANAGER: &str = "capstan-clusterresourceset";

/// Namespace of namespaced documents that name none (as `kubectl apply` does).
const DEFAULT_NAMESPACE: &str = "default";

/// What happened to one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentOutcome {
    /// `Kind namespace/name` and where it came from (`key`, document number).
    pub document: String,
    /// Why it was not applied; `None` when it was.
    pub error: Option<String>,
}

/// Why one document could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("it has no apiVersion, kind or metadata.name")]
    Incomplete,
    #[error(
        "kind {kind} ({api_version}) is not served by the workload API; it is applied once that API serves it"
    )]
    NotServed { api_version: String, kind: String },
    #[error("discovery of {api_version} failed: {reason}")]
    Discovery { api_version: String, reason: String },
    #[error("the workload API refused it: {0}")]
    Refused(String),
}

/// A discovery cache for one apply pass: one request per apiVersion.
#[derive(Default)]
pub struct Discovery {
    lists: HashMap<String, Result<APIResourceList, String>>,
}

impl Discovery {
    async fn resource(
        &mut self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), ApplyError> {
        if !self.lists.contains_key(api_version) {
            let listed = if api_version.contains('/') {
                client.list_api_group_resources(api_version).await
            } else {
                client.list_core_api_resources(api_version).await
            };
            let entry = match listed {
                Ok(list) => Ok(list),
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(APIResourceList {
                    group_version: api_version.to_owned(),
                    resources: Vec::new(),
                }),
                Err(err) => Err(err.to_string()),
            };
            self.lists.insert(api_version.to_owned(), entry);
        }
        let list = match self.lists.get(api_version) {
            Some(Ok(list)) => list,
            Some(Err(reason)) => {
                return Err(ApplyError::Discovery {
                    api_version: api_version.to_owned(),
                    reason: reason.clone(),
                });
            }
            None => {
                return Err(ApplyError::Discovery {
                    api_version: api_version.to_owned(),
                    reason: "no answer".to_owned(),
                });
            }
        };
        let found = list
            .resources
            .iter()
            .find(|r| r.kind == kind && !r.name.contains('/'))
            .ok_or_else(|| ApplyError::NotServed {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })?;
        let (group, version) = api_version
            .rsplit_once('/')
            .map_or(("", api_version), |(g, v)| (g, v));
        Ok((
            ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                plural: found.name.clone(),
            },
            found.namespaced,
        ))
    }

    /// Whether `api_version`/`kind` is served (for callers that check before applying).
    pub async fn serves(&mut self, client: &Client, api_version: &str, kind: &str) -> bool {
        self.resource(client, api_version, kind).await.is_ok()
    }
}

/// Applies one document (server-side apply, forced: the resource set owns the fields it sets).
pub async fn apply_document(
    client: &Client,
    discovery: &mut Discovery,
    document: &Document,
) -> Result<(), ApplyError> {
    let object = &document.object;
    let (Some(api_version), Some(kind), Some(name)) = (
        object["apiVersion"].as_str(),
        object["kind"].as_str(),
        object["metadata"]["name"].as_str(),
    ) else {
        return Err(ApplyError::Incomplete);
    };
    let (resource, namespaced) = discovery.resource(client, api_version, kind).await?;
    let api: Api<DynamicObject> = if namespaced {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(DEFAULT_NAMESPACE);
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
    .map_err(|err| {
        ApplyError::Refused(match err {
            kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
            other => other.to_string(),
        })
    })
}

/// Applies every document and reports each. `withhold_details` keeps the workload API's messages
/// out of the outcome (for documents from Secrets, whose refusals may quote values).
pub async fn apply_all(
    client: &Client,
    discovery: &mut Discovery,
    documents: &[Document],
    withhold_details: bool,
) -> Vec<DocumentOutcome> {
    let mut outcomes = Vec::with_capacity(documents.len());
    for document in documents {
        let result = apply_document(client, discovery, document).await;
        let error = result.err().map(|err| match err {
            ApplyError::Refused(_) if withhold_details => {
                "the workload API refused it (details withheld: the document comes from a Secret)"
                    .to_owned()
            }
            other => other.to_string(),
        });
        outcomes.push(DocumentOutcome {
            document: format!(
                "{} (key {}, document {})",
                document.describe(),
                document.key,
                document.index
            ),
            error,
        });
    }
    outcomes
}
