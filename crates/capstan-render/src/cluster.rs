//! The management-cluster objects of a cluster, in the chosen Cluster API version: Cluster,
//! Metal3Cluster, KubeadmControlPlane and its Metal3MachineTemplate, one KubeadmConfigTemplate,
//! Metal3MachineTemplate and MachineDeployment per worker pool, and the MachineHealthChecks.
//!
//! v1beta1 and v1beta2 differ in shape, not just in `apiVersion`: references carry `apiGroup`
//! instead of `apiVersion`, the KubeadmControlPlane's machine template nests its infrastructure
//! reference under `spec`, the image format is `diskFormat`, health-check timeouts are integers,
//! and kubeadm's pod and service networks come from the Cluster only.

use std::collections::BTreeMap;

use capstan_model::capi::{v1beta1 as capi1, v1beta2 as capi2};
use capstan_model::capm3::{
    self, HostSelector, Image, Metal3ClusterSpec, Metal3MachineSpec, Metal3MachineTemplateResource,
    Metal3MachineTemplateSpec,
};
use capstan_model::kubeadm::{
    self, KubeadmConfigSpec, KubeadmConfigTemplateResource, KubeadmConfigTemplateSpec,
    v1beta1 as kubeadm1, v1beta2 as kubeadm2,
};
use capstan_model::meta::{
    ContractVersionedObjectReference, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE,
    LABEL_DEPLOYMENT_NAME, LabelSelector, ObjectMeta, ObjectReference,
};
use serde_json::Value;

use crate::error::RenderError;
use crate::validate::{Plan, PoolPlan, control_plane_selector};
use crate::{CapiVersion, LABEL_CNI, encode};

/// Names of the cluster's objects, derived from the cluster and pool names.
pub(crate) struct Names<'a> {
    cluster: &'a str,
}

impl<'a> Names<'a> {
    pub fn new(cluster: &'a str) -> Self {
        Self { cluster }
    }

    pub fn cluster(&self) -> String {
        self.cluster.to_owned()
    }

    pub fn control_plane(&self) -> String {
        format!("{}-control-plane", self.cluster)
    }

    pub fn pool(&self, pool: &str) -> String {
        format!("{}-{pool}", self.cluster)
    }
}

/// Metadata of a namespaced management-cluster object, labelled with its cluster.
pub(crate) fn object_meta(
    plan: &Plan<'_>,
    name: String,
    extra_labels: &[(&str, &str)],
) -> ObjectMeta {
    let mut labels = BTreeMap::from([(LABEL_CLUSTER_NAME.to_owned(), plan.spec.name.clone())]);
    for (key, value) in extra_labels {
        labels.insert((*key).to_owned(), (*value).to_owned());
    }
    ObjectMeta {
        name: Some(name),
        namespace: Some(plan.spec.namespace.clone()),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

fn image(plan: &Plan<'_>, api_version: CapiVersion) -> Image {
    let format = plan.spec.image.format.map(|f| f.as_str().to_owned());
    let (format, disk_format) = match api_version {
        CapiVersion::V1beta1 => (format, None),
        CapiVersion::V1beta2 => (None, format),
    };
    Image {
        url: plan.spec.image.url.clone(),
        checksum: Some(plan.spec.image.checksum.trim().to_owned()),
        checksum_type: plan.checksum_type.map(|t| t.name().to_owned()),
        format,
        disk_format,
    }
}

fn machine_spec(
    plan: &Plan<'_>,
    api_version: CapiVersion,
    selector: BTreeMap<String, String>,
) -> Metal3MachineTemplateSpec {
    Metal3MachineTemplateSpec {
        node_reuse: None,
        template: Metal3MachineTemplateResource {
            spec: Metal3MachineSpec {
                image: Some(image(plan, api_version)),
                host_selector: Some(HostSelector {
                    match_labels: selector,
                    match_expressions: Vec::new(),
                }),
                ..Metal3MachineSpec::default()
            },
        },
    }
}

fn api_version_of(group: &str, version: CapiVersion) -> String {
    format!("{group}/{}", version.as_str())
}

/// Machine labels of a pool's MachineDeployment (its selector and template labels).
fn deployment_labels(plan: &Plan<'_>, deployment: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_CLUSTER_NAME.to_owned(), plan.spec.name.clone()),
        (LABEL_DEPLOYMENT_NAME.to_owned(), deployment.to_owned()),
    ])
}

/// Every object of `cluster/cluster.yaml`, in apply order.
pub(crate) fn cluster_objects(
    plan: &Plan<'_>,
    api_version: CapiVersion,
    control_plane_config: &KubeadmConfigSpec,
    worker_config: &KubeadmConfigSpec,
) -> Result<Vec<Value>, RenderError> {
    match api_version {
        CapiVersion::V1beta1 => v1beta1_objects(plan, control_plane_config, worker_config),
        CapiVersion::V1beta2 => v1beta2_objects(plan, control_plane_config, worker_config),
    }
}

fn cluster_network(plan: &Plan<'_>) -> capi1::ClusterNetwork {
    capi1::ClusterNetwork {
        api_server_port: Some(i32::from(plan.spec.control_plane.port)),
        pods: Some(capi1::NetworkRanges {
            cidr_blocks: vec![plan.pod_cidr.to_string()],
        }),
        services: Some(capi1::NetworkRanges {
            cidr_blocks: vec![plan.service_cidr.to_string()],
        }),
        service_domain: None,
    }
}

fn endpoint(plan: &Plan<'_>) -> capi1::ApiEndpoint {
    capi1::ApiEndpoint {
        host: plan.vip.to_string(),
        port: i32::from(plan.spec.control_plane.port),
    }
}

fn metal3_cluster_spec(plan: &Plan<'_>) -> Metal3ClusterSpec {
    Metal3ClusterSpec {
        control_plane_endpoint: Some(capm3::ApiEndpoint {
            host: plan.vip.to_string(),
            port: i32::from(plan.spec.control_plane.port),
        }),
        // Nodes are labelled metal3.io/uuid (see the kubelet arguments), from which CAPM3 sets
        // their provider IDs itself; no cloud controller manager runs.
        cloud_provider_enabled: Some(false),
        ..Metal3ClusterSpec::default()
    }
}

fn pool_template_names(names: &Names<'_>, pool: &PoolPlan<'_>) -> String {
    names.pool(&pool.pool.name)
}

fn v1beta1_objects(
    plan: &Plan<'_>,
    control_plane_config: &KubeadmConfigSpec,
    worker_config: &KubeadmConfigSpec,
) -> Result<Vec<Value>, RenderError> {
    let version = CapiVersion::V1beta1;
    let names = Names::new(&plan.spec.name);
    let infra = api_version_of(capm3::GROUP, version);
    let mut objects = Vec::new();

    let mut cluster = capi1::Cluster::new(
        names.cluster(),
        None,
        capi1::ClusterSpec {
            cluster_network: Some(cluster_network(plan)),
            control_plane_endpoint: Some(endpoint(plan)),
            control_plane_ref: Some(ObjectReference::to(
                &api_version_of(kubeadm::CONTROL_PLANE_GROUP, version),
                "KubeadmControlPlane",
                &names.control_plane(),
            )),
            infrastructure_ref: Some(ObjectReference::to(
                &infra,
                "Metal3Cluster",
                &names.cluster(),
            )),
            ..capi1::ClusterSpec::default()
        },
    );
    cluster.metadata = object_meta(plan, names.cluster(), &[LABEL_CNI]);
    objects.push(encode(&cluster)?);

    let mut metal3_cluster =
        capm3::v1beta1::Metal3Cluster::new(names.cluster(), None, metal3_cluster_spec(plan));
    metal3_cluster.metadata = object_meta(plan, names.cluster(), &[]);
    objects.push(encode(&metal3_cluster)?);

    let mut kcp = kubeadm1::KubeadmControlPlane::new(
        names.control_plane(),
        None,
        kubeadm1::KubeadmControlPlaneSpec {
            replicas: Some(replicas(plan.spec.control_plane.replicas)),
            version: plan.version.to_string(),
            machine_template: kubeadm1::KubeadmControlPlaneMachineTemplate {
                infrastructure_ref: ObjectReference::to(
                    &infra,
                    "Metal3MachineTemplate",
                    &names.control_plane(),
                ),
                ..kubeadm1::KubeadmControlPlaneMachineTemplate::default()
            },
            kubeadm_config_spec: control_plane_config.clone(),
            ..kubeadm1::KubeadmControlPlaneSpec::default()
        },
    );
    kcp.metadata = object_meta(plan, names.control_plane(), &[]);
    objects.push(encode(&kcp)?);

    let mut cp_template = capm3::v1beta1::Metal3MachineTemplate::new(
        names.control_plane(),
        None,
        machine_spec(plan, version, control_plane_selector(&plan.spec.name)),
    );
    cp_template.metadata = object_meta(plan, names.control_plane(), &[]);
    objects.push(encode(&cp_template)?);

    for pool in &plan.pools {
        let name = pool_template_names(&names, pool);
        let mut config_template = kubeadm1::KubeadmConfigTemplate::new(
            name.clone(),
            None,
            KubeadmConfigTemplateSpec {
                template: KubeadmConfigTemplateResource {
                    spec: worker_config.clone(),
                    ..KubeadmConfigTemplateResource::default()
                },
            },
        );
        config_template.metadata = object_meta(plan, name.clone(), &[]);
        objects.push(encode(&config_template)?);

        let mut machine_template = capm3::v1beta1::Metal3MachineTemplate::new(
            name.clone(),
            None,
            machine_spec(plan, version, pool.host_selector.clone()),
        );
        machine_template.metadata = object_meta(plan, name.clone(), &[]);
        objects.push(encode(&machine_template)?);

        let labels = deployment_labels(plan, &name);
        let mut deployment = capi1::MachineDeployment::new(
            name.clone(),
            None,
            capi1::MachineDeploymentSpec {
                cluster_name: plan.spec.name.clone(),
                replicas: Some(replicas(pool.pool.replicas)),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    match_expressions: None,
                },
                template: capi1::MachineTemplateSpec {
                    metadata: capi1::TemplateMeta {
                        labels,
                        annotations: BTreeMap::new(),
                    },
                    spec: capi1::MachineSpec {
                        cluster_name: plan.spec.name.clone(),
                        bootstrap: capi1::Bootstrap {
                            config_ref: Some(ObjectReference::to(
                                &api_version_of(kubeadm::BOOTSTRAP_GROUP, version),
                                "KubeadmConfigTemplate",
                                &name,
                            )),
                            data_secret_name: None,
                        },
                        infrastructure_ref: ObjectReference::to(
                            &infra,
                            "Metal3MachineTemplate",
                            &name,
                        ),
                        version: Some(plan.version.to_string()),
                        ..capi1::MachineSpec::default()
                    },
                },
                ..capi1::MachineDeploymentSpec::default()
            },
        );
        deployment.metadata = object_meta(plan, name, &[]);
        objects.push(encode(&deployment)?);
    }

    for (name, selector) in health_check_targets(plan) {
        let Some(check) = &plan.spec.health_check else {
            break;
        };
        let timeout = format!("{}s", check.unhealthy_timeout_seconds);
        let mut mhc = capi1::MachineHealthCheck::new(
            name.clone(),
            None,
            capi1::MachineHealthCheckSpec {
                cluster_name: plan.spec.name.clone(),
                selector,
                unhealthy_conditions: ["False", "Unknown"]
                    .into_iter()
                    .map(|status| capi1::UnhealthyCondition {
                        type_: "Ready".to_owned(),
                        status: status.to_owned(),
                        timeout: timeout.clone(),
                    })
                    .collect(),
                max_unhealthy: check.max_unhealthy.as_ref().map(int_or_percent),
                node_startup_timeout: Some(format!("{}s", check.node_startup_timeout_seconds)),
                remediation_template: None,
            },
        );
        mhc.metadata = object_meta(plan, name, &[]);
        objects.push(encode(&mhc)?);
    }
    Ok(objects)
}

fn v1beta2_objects(
    plan: &Plan<'_>,
    control_plane_config: &KubeadmConfigSpec,
    worker_config: &KubeadmConfigSpec,
) -> Result<Vec<Value>, RenderError> {
    let version = CapiVersion::V1beta2;
    let names = Names::new(&plan.spec.name);
    let mut objects = Vec::new();

    let mut cluster = capi2::Cluster::new(
        names.cluster(),
        None,
        capi2::ClusterSpec {
            cluster_network: Some(cluster_network(plan)),
            control_plane_endpoint: Some(endpoint(plan)),
            control_plane_ref: Some(ContractVersionedObjectReference::to(
                kubeadm::CONTROL_PLANE_GROUP,
                "KubeadmControlPlane",
                &names.control_plane(),
            )),
            infrastructure_ref: Some(ContractVersionedObjectReference::to(
                capm3::GROUP,
                "Metal3Cluster",
                &names.cluster(),
            )),
            ..capi2::ClusterSpec::default()
        },
    );
    cluster.metadata = object_meta(plan, names.cluster(), &[LABEL_CNI]);
    objects.push(encode(&cluster)?);

    let mut metal3_cluster =
        capm3::v1beta2::Metal3Cluster::new(names.cluster(), None, metal3_cluster_spec(plan));
    metal3_cluster.metadata = object_meta(plan, names.cluster(), &[]);
    objects.push(encode(&metal3_cluster)?);

    let mut kcp = kubeadm2::KubeadmControlPlane::new(
        names.control_plane(),
        None,
        kubeadm2::KubeadmControlPlaneSpec {
            replicas: Some(replicas(plan.spec.control_plane.replicas)),
            version: plan.version.to_string(),
            machine_template: kubeadm2::KubeadmControlPlaneMachineTemplate {
                spec: kubeadm2::KubeadmControlPlaneMachineSpec {
                    infrastructure_ref: ContractVersionedObjectReference::to(
                        capm3::GROUP,
                        "Metal3MachineTemplate",
                        &names.control_plane(),
                    ),
                    deletion: None,
                },
                ..kubeadm2::KubeadmControlPlaneMachineTemplate::default()
            },
            kubeadm_config_spec: control_plane_config.clone(),
            ..kubeadm2::KubeadmControlPlaneSpec::default()
        },
    );
    kcp.metadata = object_meta(plan, names.control_plane(), &[]);
    objects.push(encode(&kcp)?);

    let mut cp_template = capm3::v1beta2::Metal3MachineTemplate::new(
        names.control_plane(),
        None,
        machine_spec(plan, version, control_plane_selector(&plan.spec.name)),
    );
    cp_template.metadata = object_meta(plan, names.control_plane(), &[]);
    objects.push(encode(&cp_template)?);

    for pool in &plan.pools {
        let name = pool_template_names(&names, pool);
        let mut config_template = kubeadm2::KubeadmConfigTemplate::new(
            name.clone(),
            None,
            KubeadmConfigTemplateSpec {
                template: KubeadmConfigTemplateResource {
                    spec: worker_config.clone(),
                    ..KubeadmConfigTemplateResource::default()
                },
            },
        );
        config_template.metadata = object_meta(plan, name.clone(), &[]);
        objects.push(encode(&config_template)?);

        let mut machine_template = capm3::v1beta2::Metal3MachineTemplate::new(
            name.clone(),
            None,
            machine_spec(plan, version, pool.host_selector.clone()),
        );
        machine_template.metadata = object_meta(plan, name.clone(), &[]);
        objects.push(encode(&machine_template)?);

        let labels = deployment_labels(plan, &name);
        let mut deployment = capi2::MachineDeployment::new(
            name.clone(),
            None,
            capi2::MachineDeploymentSpec {
                cluster_name: plan.spec.name.clone(),
                replicas: Some(replicas(pool.pool.replicas)),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    match_expressions: None,
                },
                template: capi2::MachineTemplateSpec {
                    metadata: capi2::TemplateMeta {
                        labels,
                        annotations: BTreeMap::new(),
                    },
                    spec: capi2::MachineSpec {
                        cluster_name: plan.spec.name.clone(),
                        bootstrap: capi2::Bootstrap {
                            config_ref: Some(ContractVersionedObjectReference::to(
                                kubeadm::BOOTSTRAP_GROUP,
                                "KubeadmConfigTemplate",
                                &name,
                            )),
                            data_secret_name: None,
                        },
                        infrastructure_ref: ContractVersionedObjectReference::to(
                            capm3::GROUP,
                            "Metal3MachineTemplate",
                            &name,
                        ),
                        version: Some(plan.version.to_string()),
                        ..capi2::MachineSpec::default()
                    },
                },
                ..capi2::MachineDeploymentSpec::default()
            },
        );
        deployment.metadata = object_meta(plan, name, &[]);
        objects.push(encode(&deployment)?);
    }

    for (name, selector) in health_check_targets(plan) {
        let Some(check) = &plan.spec.health_check else {
            break;
        };
        let timeout = i32::try_from(check.unhealthy_timeout_seconds).unwrap_or(i32::MAX);
        let mut mhc = capi2::MachineHealthCheck::new(
            name.clone(),
            None,
            capi2::MachineHealthCheckSpec {
                cluster_name: plan.spec.name.clone(),
                selector,
                checks: Some(capi2::MachineHealthChecks {
                    node_startup_timeout_seconds: Some(
                        i32::try_from(check.node_startup_timeout_seconds).unwrap_or(i32::MAX),
                    ),
                    unhealthy_node_conditions: ["False", "Unknown"]
                        .into_iter()
                        .map(|status| capi2::UnhealthyCondition {
                            type_: "Ready".to_owned(),
                            status: status.to_owned(),
                            timeout_seconds: timeout,
                        })
                        .collect(),
                    unhealthy_machine_conditions: Vec::new(),
                }),
                remediation: check.max_unhealthy.as_ref().map(|max| {
                    serde_json::json!({"triggerIf": {"unhealthyLessThanOrEqualTo": int_or_percent(max)}})
                }),
            },
        );
        mhc.metadata = object_meta(plan, name, &[]);
        objects.push(encode(&mhc)?);
    }
    Ok(objects)
}

fn replicas(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

fn int_or_percent(value: &crate::spec::IntOrPercent) -> Value {
    match value {
        crate::spec::IntOrPercent::Count(n) => Value::from(*n),
        crate::spec::IntOrPercent::Percent(p) => Value::from(p.as_str()),
    }
}

/// Name and machine selector of every MachineHealthCheck to write.
fn health_check_targets(plan: &Plan<'_>) -> Vec<(String, LabelSelector)> {
    let Some(check) = &plan.spec.health_check else {
        return Vec::new();
    };
    let names = Names::new(&plan.spec.name);
    let mut targets = Vec::new();
    if check.control_plane {
        targets.push((
            names.control_plane(),
            LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (LABEL_CLUSTER_NAME.to_owned(), plan.spec.name.clone()),
                    (LABEL_CONTROL_PLANE.to_owned(), String::new()),
                ])),
                match_expressions: None,
            },
        ));
    }
    if check.workers {
        for pool in &plan.pools {
            let name = names.pool(&pool.pool.name);
            targets.push((
                name.clone(),
                LabelSelector {
                    match_labels: Some(deployment_labels(plan, &name)),
                    match_expressions: None,
                },
            ));
        }
    }
    targets
}
