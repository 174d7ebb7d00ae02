//! The BMC networks a namespace's hosts may use: an optional allow-list that the platform team
//! sets on the Namespace (annotation [`ANNOTATION_BMC_NETWORKS`], CIDRs or addresses separated by
//! commas), so that a tenant's BareMetalHost cannot make capstan send the tenant's BMC
//! credentials — or any request — to an address outside the networks the team's BMCs are in.
//!
//! The Namespace is read live on every pass that may talk to a BMC, so a list the platform team
//! just set or tightened applies to the next request. Tenants with `admin` or `edit` in their
//! namespace cannot change it: those roles may read their Namespace, not write it.
//!
//! What a pass does with it:
//! - no annotation: any address, as before (no condition);
//! - an address outside the list, or an annotation that does not parse: no provisioner is made,
//!   so nothing is read for the host and nothing is sent; the host fails registration with the
//!   reason, and its [`CONDITION_BMC_PERMITTED`] condition is `False`;
//! - an address inside the list: the condition is `True`; a BMC given by name is checked by the
//!   driver against the list each time it resolves the name, before it connects.

use capstan_drivers::{BmcAddress, BmcNetworks, Driver};
use capstan_model::meta::Condition;
use capstan_runtime::conditions;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// Annotation on a Namespace: the networks its BareMetalHosts' BMCs may be in.
pub const ANNOTATION_BMC_NETWORKS: &str = "hosts.capstan.io/bmc-networks";
/// Host condition: whether the namespace's BMC networks permit the host's BMC address.
pub const CONDITION_BMC_PERMITTED: &str = "BMCAddressPermitted";

/// Why the namespace's BMC networks could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NetworksError {
    #[error("reading Namespace {namespace}")]
    Read {
        namespace: String,
        source: Box<kube::Error>,
    },
}

/// What a namespace's BMC networks say of one host.
#[derive(Clone, Debug, Default)]
pub struct Permission {
    /// The networks the driver must hold every connection to, when the namespace has a list.
    pub networks: Option<BmcNetworks>,
    /// Why the host's BMC may not be contacted at all, when it may not.
    pub refusal: Option<String>,
    /// The host's condition, when the namespace has a list.
    pub condition: Option<Condition>,
}

fn condition(status: &str, reason: &str, message: String) -> Condition {
    Condition {
        type_: CONDITION_BMC_PERMITTED.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        ..Condition::default()
    }
}

/// The BMC networks of `namespace` as its annotation says them, read live: `None` without one.
async fn read(client: &Client, namespace: &str) -> Result<Option<String>, NetworksError> {
    let found = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
        .map_err(|source| NetworksError::Read {
            namespace: namespace.to_owned(),
            source: Box::new(source),
        })?;
    Ok(found
        .and_then(|ns| ns.metadata.annotations)
        .and_then(|mut annotations| annotations.remove(ANNOTATION_BMC_NETWORKS)))
}

/// What the BMC networks of `namespace` say of `address`, the host's parsed `spec.bmc.address`.
pub async fn permission(
    client: &Client,
    namespace: &str,
    address: &BmcAddress,
) -> Result<Permission, NetworksError> {
    let Some(text) = read(client, namespace).await? else {
        return Ok(Permission::default());
    };
    Ok(judge(namespace, &text, address))
}

/// [`permission`] once the annotation's text is known (pure).
fn judge(namespace: &str, text: &str, address: &BmcAddress) -> Permission {
    let where_set = format!("annotation {ANNOTATION_BMC_NETWORKS} of Namespace {namespace}");
    let networks = match BmcNetworks::parse(text) {
        Ok(networks) => networks,
        Err(err) => {
            let message = format!(
                "{where_set}: {err}; no BMC of this namespace is contacted until the platform team fixes it"
            );
            return Permission {
                networks: None,
                refusal: Some(message.clone()),
                condition: Some(condition(
                    conditions::FALSE,
                    "InvalidPermittedNetworks",
                    message,
                )),
            };
        }
    };
    if let Err(err) = networks.check(address) {
        let message = format!(
            "spec.bmc.address: {err}: the {where_set} permits {networks}; use a BMC in those networks, or ask the platform team to add its network"
        );
        return Permission {
            networks: Some(networks),
            refusal: Some(message.clone()),
            condition: Some(condition(
                conditions::FALSE,
                "OutsidePermittedNetworks",
                message,
            )),
        };
    }
    let message = if address.driver == Driver::Fake {
        "a fake:// BMC is simulated in capstan and reaches no network".to_owned()
    } else if address.host.parse::<std::net::IpAddr>().is_ok() {
        format!(
            "{} is in the networks the {where_set} permits ({networks})",
            address.host
        )
    } else {
        format!(
            "{} is a name: each address it resolves to is checked against the networks the {where_set} permits ({networks}) before capstan connects",
            address.host
        )
    };
    Permission {
        networks: Some(networks),
        refusal: None,
        condition: Some(condition(conditions::TRUE, "InPermittedNetworks", message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> BmcAddress {
        BmcAddress::parse(text).unwrap()
    }

    #[test]
    fn an_address_outside_the_list_is_refused_and_the_condition_says_why() {
        let judged = judge(
            "team-a",
            "10.0.0.0/24",
            &address("redfish+http://203.0.113.9/redfish/v1/Systems/1"),
        );
        let refusal = judged.refusal.unwrap();
        assert!(
            refusal.contains("203.0.113.9")
                && refusal.contains("10.0.0.0/24")
                && refusal.contains(ANNOTATION_BMC_NETWORKS)
                && refusal.contains("Namespace team-a"),
            "{refusal}"
        );
        let condition = judged.condition.unwrap();
        assert_eq!(condition.status, conditions::FALSE);
        assert_eq!(
            condition.reason.as_deref(),
            Some("OutsidePermittedNetworks")
        );
    }

    #[test]
    fn an_address_inside_is_permitted_and_a_bad_list_permits_nothing() {
        let inside = judge(
            "team-a",
            "10.0.0.0/24, 192.0.2.7",
            &address("redfish+http://10.0.0.5/redfish/v1/Systems/1"),
        );
        assert!(inside.refusal.is_none());
        assert_eq!(inside.condition.unwrap().status, conditions::TRUE);
        assert!(
            inside
                .networks
                .unwrap()
                .permits("10.0.0.9".parse().unwrap())
        );
        let bad = judge(
            "team-a",
            "10.0.0.0/33",
            &address("redfish+http://10.0.0.5/redfish/v1/Systems/1"),
        );
        assert!(
            bad.refusal
                .unwrap()
                .contains("\"10.0.0.0/33\" is not a network")
        );
        assert_eq!(
            bad.condition.unwrap().reason.as_deref(),
            Some("InvalidPermittedNetworks")
        );
    }
}
