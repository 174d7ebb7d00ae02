//! Reading a node's bootstrap data the way cloud-init and kubeadm would, far enough to know what
//! the node would do: render the `## template: jinja` variables from the host's meta data, parse the
//! cloud-config, find the `kubeadm init|join` in `runcmd` and the file its `--config` names among
//! `write_files`, and read the kubeadm documents (InitConfiguration, ClusterConfiguration,
//! JoinConfiguration; v1beta3 maps and v1beta4 lists for `kubeletExtraArgs`).

use base64::Engine;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where CABPK writes the kubeadm configuration of `kubeadm init`.
pub const KUBEADM_CONFIG_PATH: &str = "/run/kubeadm/kubeadm.yaml";
/// Where CABPK writes the kubeadm configuration of `kubeadm join`.
pub const KUBEADM_JOIN_CONFIG_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";

/// The file after `--config` (or `--config=`) in a kubeadm command line.
fn config_argument(command: &str) -> Option<&str> {
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        if word == "--config" {
            return words.next();
        }
        if let Some(path) = word.strip_prefix("--config=") {
            return Some(path);
        }
    }
    None
}

/// Why bootstrap data cannot be followed (a real node would fail the same way).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CloudConfigError {
    #[error("the bootstrap data is not UTF-8 text")]
    NotText,
    #[error("template variable `{0}` is not defined by the host's meta data")]
    UndefinedVariable(String),
    #[error("the cloud-config is not YAML: {0}")]
    Yaml(String),
    #[error("write_files has no {0}, the file the kubeadm command reads")]
    NoKubeadmConfig(String),
    #[error("write_files entry {path}: {reason}")]
    BadFile { path: String, reason: String },
    #[error("runcmd runs neither `kubeadm init` nor `kubeadm join`")]
    NoKubeadmCommand,
    #[error("{0} has no {1}")]
    MissingDocument(String, &'static str),
}

/// What the node would do.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeadmAction {
    /// `kubeadm init`: the first control plane.
    Init,
    /// `kubeadm join`: a worker, or a further control plane when `control_plane` is set.
    Join { control_plane: bool },
}

/// The parts of a node's bootstrap the simulation acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct Bootstrap {
    pub action: KubeadmAction,
    /// `nodeRegistration.name`, when set.
    pub node_name: Option<String>,
    /// Labels from the kubelet's `node-labels`.
    pub node_labels: BTreeMap<String, String>,
    /// The kubelet's `provider-id`, when set.
    pub provider_id: Option<String>,
    /// For a join: the bootstrap token `id.secret`.
    pub token: Option<String>,
    /// For init: the tokens InitConfiguration asks kubeadm to create.
    pub init_tokens: Vec<String>,
    /// The ClusterConfiguration document (init), as YAML-ready JSON.
    pub cluster_configuration: Option<Value>,
    /// `kubernetesVersion` of the ClusterConfiguration.
    pub kubernetes_version: Option<String>,
    /// The commands of `runcmd`, in order (faults name the step that fails).
    pub commands: Vec<String>,
}

/// Renders cloud-init's jinja variables: `{{ ds.meta_data.KEY }}` (also `ds.meta_data['KEY']`) from
/// `meta`, and `{{ v1.local_hostname }}` / `{{ v1.instance_id }}`. Text without the
/// `## template: jinja` header is returned as is, as cloud-init does.
pub fn render_jinja(text: &str, meta: &Map<String, Value>) -> Result<String, CloudConfigError> {
    if !text.trim_start().starts_with("## template: jinja") {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let expression = after[..end].trim();
        out.push_str(&lookup(expression, meta)?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What cloud-init writes in place of a jinja variable nothing defines.
pub const MISSING_JINJA_PREFIX: &str = "CI_MISSING_JINJA_VAR/";

/// A plain jinja variable name (`CLUSTER_APIENDPOINT_HOST`), not an expression.
fn is_bare_name(expression: &str) -> bool {
    !expression.is_empty()
        && expression
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn lookup(expression: &str, meta: &Map<String, Value>) -> Result<String, CloudConfigError> {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let key = if let Some(key) = expression.strip_prefix("ds.meta_data.") {
        key.to_owned()
    } else if let Some(key) = expression
        .strip_prefix("ds.meta_data[")
        .and_then(|k| k.strip_suffix(']'))
    {
        key.trim_matches(|c| c == '\'' || c == '"').to_owned()
    } else {
        match expression {
            "v1.local_hostname" | "v1.local-hostname" => "hostname".to_owned(),
            "v1.instance_id" | "v1.instance-id" => "uuid".to_owned(),
            // cloud-init renders any other undefined variable as this marker (with a warning)
            // and the node goes on: CAPM3's example templates carry such variables.
            other if is_bare_name(other) => return Ok(format!("{MISSING_JINJA_PREFIX}{other}")),
            other => return Err(CloudConfigError::UndefinedVariable(other.to_owned())),
        }
    };
    meta.get(&key)
        .or_else(|| meta.get(&key.replace('_', "-")))
        .map(text)
        .ok_or(CloudConfigError::UndefinedVariable(expression.to_owned()))
}

fn yaml_documents(name: &str, text: &str) -> Result<Vec<Value>, CloudConfigError> {
    capstan_manifest::parse_documents(name, text)
        .map(|docs| docs.into_iter().map(|d| d.value).collect())
        .map_err(|e| CloudConfigError::Yaml(e.to_string()))
}

fn file_content(file: &Value, path: &str) -> Result<String, CloudConfigError> {
    let content = file["content"].as_str().unwrap_or_default();
    match file["encoding"].as_str().unwrap_or("text/plain") {
        "b64" | "base64" => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(content.trim())
                .map_err(|e| CloudConfigError::BadFile {
                    path: path.to_owned(),
                    reason: format!("content is not base64 ({e})"),
                })?;
            String::from_utf8(bytes).map_err(|_| CloudConfigError::BadFile {
                path: path.to_owned(),
                reason: "content is not UTF-8".into(),
            })
        }
        "text/plain" | "" => Ok(content.to_owned()),
        other => Err(CloudConfigError::BadFile {
            path: path.to_owned(),
            reason: format!("encoding {other:?} is not supported by the simulation"),
        }),
    }
}

/// The kubelet's extra arguments, from a v1beta3 map or a v1beta4 list of `{name, value}`.
fn kubelet_args(registration: &Value) -> BTreeMap<String, String> {
    let args = &registration["kubeletExtraArgs"];
    match args {
        Value::Object(map) => map
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        Value::Array(list) => list
            .iter()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_owned(),
                    e["value"].as_str()?.to_owned(),
                ))
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Parses `node-labels` (`a=b,c=d`).
pub fn parse_node_labels(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// Reads bootstrap data (already fetched from its Secret) against the host's meta data.
pub fn read(data: &[u8], meta: &Map<String, Value>) -> Result<Bootstrap, CloudConfigError> {
    let text = std::str::from_utf8(data).map_err(|_| CloudConfigError::NotText)?;
    let rendered = render_jinja(text, meta)?;
    let config = yaml_documents("user-data", &rendered)?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    let commands: Vec<String> = config["runcmd"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| match c {
            Value::Array(parts) => parts
                .iter()
                .map(|p| p.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" "),
            other => other.as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    // The kubeadm command decides the action, and its `--config` the file kubeadm reads (CABPK:
    // `/run/kubeadm/kubeadm.yaml` for init, `/run/kubeadm/kubeadm-join-config.yaml` for join).
    let (init, command) = if let Some(c) = commands.iter().find(|c| c.contains("kubeadm init")) {
        (true, c)
    } else if let Some(c) = commands.iter().find(|c| c.contains("kubeadm join")) {
        (false, c)
    } else {
        return Err(CloudConfigError::NoKubeadmCommand);
    };
    let config_path = config_argument(command).unwrap_or(if init {
        KUBEADM_CONFIG_PATH
    } else {
        KUBEADM_JOIN_CONFIG_PATH
    });
    let file = config["write_files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["path"].as_str() == Some(config_path))
        .ok_or_else(|| CloudConfigError::NoKubeadmConfig(config_path.to_owned()))?;
    let kubeadm_text = file_content(file, config_path)?;
    let documents = yaml_documents(config_path, &kubeadm_text)?;
    let find = |kind: &str| {
        documents
            .iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .cloned()
    };
    let action = if init {
        KubeadmAction::Init
    } else {
        let join = find("JoinConfiguration").ok_or_else(|| {
            CloudConfigError::MissingDocument(config_path.to_owned(), "JoinConfiguration")
        })?;
        KubeadmAction::Join {
            control_plane: !join["controlPlane"].is_null(),
        }
    };
    let (registration, token, init_tokens, cluster_configuration) = match action {
        KubeadmAction::Init => {
            let init = find("InitConfiguration").unwrap_or(Value::Null);
            let cluster = find("ClusterConfiguration").ok_or_else(|| {
                CloudConfigError::MissingDocument(config_path.to_owned(), "ClusterConfiguration")
            })?;
            let tokens = init["bootstrapTokens"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["token"].as_str().map(str::to_owned))
                .collect();
            (
                init["nodeRegistration"].clone(),
                None,
                tokens,
                Some(cluster),
            )
        }
        KubeadmAction::Join { .. } => {
            let join = find("JoinConfiguration").unwrap_or(Value::Null);
            let token = join["discovery"]["bootstrapToken"]["token"]
                .as_str()
                .or_else(|| join["discovery"]["tlsBootstrapToken"].as_str())
                .map(str::to_owned);
            (join["nodeRegistration"].clone(), token, Vec::new(), None)
        }
    };
    let args = kubelet_args(&registration);
    Ok(Bootstrap {
        action,
        node_name: registration["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        node_labels: args
            .get("node-labels")
            .map(|l| parse_node_labels(l))
            .unwrap_or_default(),
        provider_id: args.get("provider-id").filter(|p| !p.is_empty()).cloned(),
        token,
        init_tokens,
        kubernetes_version: cluster_configuration
            .as_ref()
            .and_then(|c| c["kubernetesVersion"].as_str().map(str::to_owned)),
        cluster_configuration,
        commands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> Map<String, Value> {
        json!({"uuid": "3f1c-uid", "name": "node-0", "hostname": "node-0", "local-hostname": "node-0"})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    const INIT: &str = r#"## template: jinja
#cloud-config
write_files:
- path: /etc/kubernetes/pki/ca.crt
  owner: root:root
  permissions: '0640'
  content: |
    not a real certificate
- path: /run/kubeadm/kubeadm.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: ClusterConfiguration
    clusterName: capi-1
    kubernetesVersion: v1.30.2
    controlPlaneEndpoint: 192.0.2.10:6443
    ---
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: InitConfiguration
    bootstrapTokens:
    - token: abcdef.0123456789abcdef
    nodeRegistration:
      name: '{{ ds.meta_data.name }}'
      kubeletExtraArgs:
        node-labels: 'metal3.io/uuid={{ ds.meta_data.uuid }},tier=cp'
runcmd:
- 'echo pre'
- 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
"#;

    #[test]
    fn init_is_read_with_its_labels_and_version() {
        let bootstrap = read(INIT.as_bytes(), &meta()).unwrap();
        assert_eq!(bootstrap.action, KubeadmAction::Init);
        assert_eq!(bootstrap.node_name.as_deref(), Some("node-0"));
        assert_eq!(
            bootstrap
                .node_labels
                .get("metal3.io/uuid")
                .map(String::as_str),
            Some("3f1c-uid")
        );
        assert_eq!(
            bootstrap.node_labels.get("tier").map(String::as_str),
            Some("cp")
        );
        assert_eq!(bootstrap.kubernetes_version.as_deref(), Some("v1.30.2"));
        assert_eq!(
            bootstrap.init_tokens,
            vec!["abcdef.0123456789abcdef".to_owned()]
        );
        assert_eq!(bootstrap.commands.len(), 2);
    }

    #[test]
    fn join_v1beta4_list_arguments_and_base64_files() {
        let kubeadm = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    token: tok123.secretsecret12345\n    apiServerEndpoint: 192.0.2.10:6443\nnodeRegistration:\n  kubeletExtraArgs:\n  - name: provider-id\n    value: metal3://ns/h/m\n  - name: node-labels\n    value: metal3.io/uuid={{ ds.meta_data.uuid }}\ncontrolPlane:\n  localAPIEndpoint: {}\n";
        let rendered_first =
            render_jinja(&format!("## template: jinja\n{kubeadm}"), &meta()).unwrap();
        assert!(rendered_first.contains("3f1c-uid"));
        let encoded = base64::engine::general_purpose::STANDARD.encode(kubeadm);
        let data = format!(
            "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  encoding: base64\n  content: {encoded}\nruncmd:\n- [kubeadm, join, --config, /run/kubeadm/kubeadm.yaml]\n"
        );
        let bootstrap = read(data.as_bytes(), &meta()).unwrap();
        assert_eq!(
            bootstrap.action,
            KubeadmAction::Join {
                control_plane: true
            }
        );
        assert_eq!(bootstrap.token.as_deref(), Some("tok123.secretsecret12345"));
        assert_eq!(bootstrap.provider_id.as_deref(), Some("metal3://ns/h/m"));
        // Without the jinja header the file's own braces stay unrendered, as with cloud-init.
        assert_eq!(
            bootstrap
                .node_labels
                .get("metal3.io/uuid")
                .map(String::as_str),
            Some("{{ ds.meta_data.uuid }}")
        );
    }

    #[test]
    fn refusals_name_the_problem() {
        let cases: Vec<(String, CloudConfigError)> = vec![
            ("## template: jinja\nx: '{{ ds.meta_data.nope }}'\n".into(), CloudConfigError::UndefinedVariable("ds.meta_data.nope".into())),
            ("#cloud-config\nruncmd: [kubeadm init]\n".into(), CloudConfigError::NoKubeadmConfig(KUBEADM_CONFIG_PATH.into())),
            ("#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: 'kind: JoinConfiguration'\nruncmd: ['kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml']\n".into(), CloudConfigError::NoKubeadmConfig(KUBEADM_JOIN_CONFIG_PATH.into())),
            ("#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: 'kind: JoinConfiguration'\nruncmd: [echo]\n".into(), CloudConfigError::NoKubeadmCommand),
            ("#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: 'kind: InitConfiguration'\nruncmd: [kubeadm init]\n".into(), CloudConfigError::MissingDocument(KUBEADM_CONFIG_PATH.into(), "ClusterConfiguration")),
        ];
        for (data, want) in cases {
            assert_eq!(read(data.as_bytes(), &meta()).err(), Some(want), "{data}");
        }
        assert_eq!(
            read(&[0xff], &meta()).err(),
            Some(CloudConfigError::NotText)
        );
    }

    #[test]
    fn undefined_plain_variables_render_as_cloud_init_renders_them() {
        let text = "## template: jinja\nvip: '{{ CLUSTER_APIENDPOINT_HOST }}'\nname: '{{ ds.meta_data.name }}'\n";
        let rendered = render_jinja(text, &meta()).unwrap();
        assert!(
            rendered.contains("vip: 'CI_MISSING_JINJA_VAR/CLUSTER_APIENDPOINT_HOST'"),
            "{rendered}"
        );
        assert!(rendered.contains("name: 'node-0'"), "{rendered}");
    }

    #[test]
    fn node_labels_parse() {
        let labels = parse_node_labels("a=b, c=d,e");
        assert_eq!(labels.len(), 3);
        assert_eq!(labels["c"], "d");
        assert_eq!(labels["e"], "");
    }
}
