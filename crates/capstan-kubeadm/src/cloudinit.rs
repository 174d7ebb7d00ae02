//! The cloud-config a node boots with, in the layout Cluster API's kubeadm bootstrap provider emits.
//!
//! ```text
//! ## template: jinja
//! #cloud-config
//! write_files:   certificates (0640, keys 0600), the spec's files, /run/kubeadm/kubeadm.yaml
//!                (init) or /run/kubeadm/kubeadm-join-config.yaml (join), /run/cluster-api/placeholder
//! runcmd:        preKubeadmCommands, `kubeadm init|join --config … && echo success >
//!                /run/cluster-api/bootstrap-success.complete`, postKubeadmCommands
//! bootcmd, users, ntp, disk_setup, fs_setup, mounts
//! ```
//!
//! With bootstrap reporting (see [`crate::report`]) each `runcmd` entry runs through
//! [`STEP_RUNNER_PATH`], which runs the command with `sh -c`, keeps its output in cloud-init's log and
//! POSTs `started`, `succeeded` or `failed` (with the exit code and the last lines of output) to
//! capstan. The runner carries the per-machine token, so it is written `0700` root-only; a report
//! that cannot be delivered never fails the bootstrap. Without reporting the commands are the plain
//! strings Cluster API writes.
//!
//! The `## template: jinja` header makes cloud-init render the document with Jinja first (Metal3's
//! `{{ ds.meta_data.* }}` in node names and labels): nothing capstan writes contains `{{`, `{%` or
//! `{#` of its own.

use crate::certs::{ClusterCertificates, Purpose};
use serde_json::{Map, Value, json};
use yaml_rust2::yaml::Hash;
use yaml_rust2::{Yaml, YamlEmitter};

/// Where `kubeadm init` reads its configuration.
pub const INIT_CONFIG_PATH: &str = "/run/kubeadm/kubeadm.yaml";
/// Where `kubeadm join` reads its configuration.
pub const JOIN_CONFIG_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";
/// Written when kubeadm succeeded (Cluster API's bootstrap sentinel).
pub const SENTINEL_PATH: &str = "/run/cluster-api/bootstrap-success.complete";
/// Creates `/run/cluster-api` on every OS, as Cluster API does.
pub const PLACEHOLDER_PATH: &str = "/run/cluster-api/placeholder";
/// The step runner that reports each command to capstan.
pub const STEP_RUNNER_PATH: &str = "/run/cluster-api/capstan-step.sh";
/// How many lines of a failed command's output are reported.
pub const OUTPUT_TAIL_LINES: usize = 40;
/// At most this many bytes of output are reported.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

const PLACEHOLDER_CONTENT: &str = "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)";

/// Why no cloud-config could be written.
#[derive(Debug, thiserror::Error)]
pub enum CloudInitError {
    #[error("emitting YAML: {0}")]
    Emit(String),
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
}

/// What the node does with kubeadm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `kubeadm init`: the first control-plane node of the cluster.
    Init,
    /// `kubeadm join` with `controlPlane`.
    JoinControlPlane,
    /// `kubeadm join` as a worker.
    JoinWorker,
}

/// A file cloud-init writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteFile {
    pub path: String,
    pub owner: String,
    pub permissions: String,
    /// Cluster API's encoding (`base64`, `gzip`, `gzip+base64`), if the content is encoded.
    pub encoding: Option<String>,
    pub append: bool,
    pub content: String,
}

impl WriteFile {
    fn plain(path: &str, permissions: &str, content: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            owner: "root:root".to_owned(),
            permissions: permissions.to_owned(),
            encoding: None,
            append: false,
            content: content.into(),
        }
    }
}

/// Where and how a node reports its bootstrap steps.
#[derive(Clone, PartialEq, Eq)]
pub struct Reporting {
    /// The URL steps are POSTed to (this config's, see [`crate::report::steps_url`]).
    pub url: String,
    /// The bearer token of this config. Never logged.
    pub token: String,
}

impl std::fmt::Debug for Reporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporting")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Everything one node's cloud-config is made of.
#[derive(Debug)]
pub struct BootstrapData<'a> {
    pub role: Role,
    /// The cluster's key pairs, written for `Init` and `JoinControlPlane`.
    pub certificates: Option<&'a ClusterCertificates>,
    /// The kubeadm configuration documents (ClusterConfiguration + InitConfiguration, or
    /// JoinConfiguration).
    pub kubeadm_documents: Vec<Value>,
    /// The spec's `files`, with `contentFrom` already resolved.
    pub files: Vec<WriteFile>,
    /// The KubeadmConfig spec as JSON (commands, users, ntp, disks, mounts).
    pub spec: &'a Value,
    /// Users with `passwdFrom` resolved: `(user name, password)`.
    pub passwords: Vec<(String, String)>,
    pub reporting: Option<Reporting>,
}

/// The kubeadm command of `role` with Cluster API's sentinel.
pub fn kubeadm_command(role: Role) -> String {
    match role {
        Role::Init => {
            format!("kubeadm init --config {INIT_CONFIG_PATH}  && echo success > {SENTINEL_PATH}")
        }
        Role::JoinControlPlane | Role::JoinWorker => {
            format!("kubeadm join --config {JOIN_CONFIG_PATH}  && echo success > {SENTINEL_PATH}")
        }
    }
}

/// The commands of `runcmd`, in order (before wrapping in the step runner).
pub fn commands(spec: &Value, role: Role) -> Vec<String> {
    let list = |key: &str| -> Vec<String> {
        spec.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut commands = list("preKubeadmCommands");
    commands.push(kubeadm_command(role));
    commands.extend(list("postKubeadmCommands"));
    commands
}

/// The step runner script for `reporting`.
pub fn step_runner(reporting: &Reporting) -> String {
    format!(
        r#"#!/bin/sh
# Runs one bootstrap step and reports it to capstan, which shows it on the Machine.
# Usage: capstan-step.sh INDEX TOTAL COMMAND
# The command runs as cloud-init would run it (sh -c); its output still goes to cloud-init's log.
# A report that cannot be delivered never changes the step's result.
# Reports are numbered in the order they are sent (step N's start is 2N-1, its end 2N): capstan
# takes each number once and in order, so a replayed or late report is refused.
url='{url}'
token='{token}'
index="$1"
total="$2"
command="$3"
log_dir="${{CAPSTAN_STEP_LOG_DIR:-/run/cluster-api}}"
log="$log_dir/capstan-step-$index.log"
encoded=$(printf '%s' "$command" | base64 | tr -d '\n')
report() {{
  if command -v curl >/dev/null 2>&1; then
    curl -sS -m 10 -o /dev/null -X POST \
      -H "Authorization: Bearer $token" -H "X-Capstan-Step: $index" -H "X-Capstan-Steps: $total" \
      -H "X-Capstan-State: $1" -H "X-Capstan-Exit-Code: $2" -H "X-Capstan-Command: $encoded" \
      -H "X-Capstan-Sequence: $4" -H "Content-Type: text/plain" --data-binary "@$3" "$url" || true
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 10 -O /dev/null \
      --header="Authorization: Bearer $token" --header="X-Capstan-Step: $index" --header="X-Capstan-Steps: $total" \
      --header="X-Capstan-State: $1" --header="X-Capstan-Exit-Code: $2" --header="X-Capstan-Command: $encoded" \
      --header="X-Capstan-Sequence: $4" --header="Content-Type: text/plain" --post-file="$3" "$url" || true
  fi
}}
report started 0 /dev/null $((index * 2 - 1))
sh -c "$command" >"$log" 2>&1
status=$?
cat "$log"
if [ "$status" -eq 0 ]; then
  report succeeded 0 /dev/null $((index * 2))
else
  tail -n {lines} "$log" | tail -c {bytes} > "$log.tail"
  report failed "$status" "$log.tail" $((index * 2))
fi
exit "$status"
"#,
        url = reporting.url,
        token = reporting.token,
        lines = OUTPUT_TAIL_LINES,
        bytes = OUTPUT_TAIL_BYTES,
    )
}

fn write_file(file: &WriteFile) -> Value {
    let mut entry = Map::new();
    entry.insert("path".into(), json!(file.path));
    entry.insert("owner".into(), json!(file.owner));
    entry.insert("permissions".into(), json!(file.permissions));
    if let Some(encoding) = &file.encoding {
        let cloud_init = match encoding.as_str() {
            "base64" => "b64",
            "gzip" => "gz",
            "gzip+base64" => "gz+b64",
            other => other,
        };
        entry.insert("encoding".into(), json!(cloud_init));
    }
    if file.append {
        entry.insert("append".into(), json!(true));
    }
    entry.insert("content".into(), json!(file.content));
    Value::Object(entry)
}

/// The kubeadm documents as one YAML stream (`---` before each).
pub fn kubeadm_yaml(documents: &[Value]) -> Result<String, CloudInitError> {
    let mut out = String::new();
    for document in documents {
        out.push_str(&to_yaml(document)?);
        out.push('\n');
    }
    Ok(out)
}

fn users(spec: &Value, passwords: &[(String, String)]) -> Vec<Value> {
    let Some(users) = spec.get("users").and_then(Value::as_array) else {
        return Vec::new();
    };
    users
        .iter()
        .map(|user| {
            let mut out = Map::new();
            let name = user.get("name").and_then(Value::as_str).unwrap_or_default();
            out.insert("name".into(), json!(name));
            for (from, to) in [
                ("gecos", "gecos"),
                ("groups", "groups"),
                ("homeDir", "homedir"),
                ("inactive", "inactive"),
                ("shell", "shell"),
                ("passwd", "passwd"),
                ("primaryGroup", "primary_group"),
                ("lockPassword", "lock_passwd"),
                ("sudo", "sudo"),
            ] {
                if let Some(value) = user.get(from).filter(|v| !v.is_null()) {
                    out.insert(to.into(), value.clone());
                }
            }
            if let Some((_, password)) = passwords.iter().find(|(user, _)| user == name) {
                out.insert("passwd".into(), json!(password));
            }
            if let Some(keys) = user
                .get("sshAuthorizedKeys")
                .and_then(Value::as_array)
                .filter(|k| !k.is_empty())
            {
                out.insert("ssh_authorized_keys".into(), Value::Array(keys.clone()));
            }
            Value::Object(out)
        })
        .collect()
}

fn disk_setup(spec: &Value, config: &mut Map<String, Value>) {
    let Some(disks) = spec.get("diskSetup") else {
        return;
    };
    if let Some(partitions) = disks.get("partitions").and_then(Value::as_array) {
        let mut table = Map::new();
        for partition in partitions {
            let Some(device) = partition.get("device").and_then(Value::as_str) else {
                continue;
            };
            let mut entry = Map::new();
            entry.insert(
                "table_type".into(),
                partition.get("tableType").cloned().unwrap_or(json!("mbr")),
            );
            entry.insert(
                "layout".into(),
                partition.get("layout").cloned().unwrap_or(json!(true)),
            );
            if let Some(overwrite) = partition.get("overwrite") {
                entry.insert("overwrite".into(), overwrite.clone());
            }
            table.insert(device.to_owned(), Value::Object(entry));
        }
        if !table.is_empty() {
            config.insert("disk_setup".into(), Value::Object(table));
        }
    }
    if let Some(filesystems) = disks.get("filesystems").and_then(Value::as_array) {
        let setups: Vec<Value> = filesystems
            .iter()
            .map(|fs| {
                let mut entry = Map::new();
                for (from, to) in [
                    ("label", "label"),
                    ("filesystem", "filesystem"),
                    ("device", "device"),
                    ("partition", "partition"),
                    ("overwrite", "overwrite"),
                    ("replaceFS", "replace_fs"),
                    ("extraOpts", "extra_opts"),
                ] {
                    if let Some(value) = fs.get(from).filter(|v| !v.is_null()) {
                        entry.insert(to.into(), value.clone());
                    }
                }
                Value::Object(entry)
            })
            .collect();
        if !setups.is_empty() {
            config.insert("fs_setup".into(), Value::Array(setups));
        }
    }
}

/// The cloud-config of `data`, with the `## template: jinja` header.
pub fn render(data: &BootstrapData<'_>) -> Result<String, CloudInitError> {
    let mut files = Vec::new();
    if data.role != Role::JoinWorker
        && let Some(certificates) = data.certificates
    {
        for purpose in Purpose::ALL {
            let material = certificates.get(purpose);
            let (cert_path, key_path) = purpose.node_paths();
            files.push(WriteFile::plain(cert_path, "0640", material.cert.clone()));
            files.push(WriteFile::plain(key_path, "0600", material.key.clone()));
        }
    }
    files.extend(data.files.iter().cloned());
    let config_path = match data.role {
        Role::Init => INIT_CONFIG_PATH,
        Role::JoinControlPlane | Role::JoinWorker => JOIN_CONFIG_PATH,
    };
    files.push(WriteFile::plain(
        config_path,
        "0640",
        kubeadm_yaml(&data.kubeadm_documents)?,
    ));
    files.push(WriteFile::plain(
        PLACEHOLDER_PATH,
        "0640",
        PLACEHOLDER_CONTENT,
    ));
    if let Some(reporting) = &data.reporting {
        files.push(WriteFile::plain(
            STEP_RUNNER_PATH,
            "0700",
            step_runner(reporting),
        ));
    }

    let mut config = Map::new();
    config.insert(
        "write_files".into(),
        Value::Array(files.iter().map(write_file).collect()),
    );
    let commands = commands(data.spec, data.role);
    let total = commands.len();
    let runcmd: Vec<Value> = commands
        .into_iter()
        .enumerate()
        .map(|(index, command)| match &data.reporting {
            Some(_) => json!([
                "sh",
                STEP_RUNNER_PATH,
                (index + 1).to_string(),
                total.to_string(),
                command
            ]),
            None => Value::String(command),
        })
        .collect();
    config.insert("runcmd".into(), Value::Array(runcmd));
    if let Some(boot) = data
        .spec
        .get("bootCommands")
        .and_then(Value::as_array)
        .filter(|b| !b.is_empty())
    {
        config.insert("bootcmd".into(), Value::Array(boot.clone()));
    }
    let users = users(data.spec, &data.passwords);
    if !users.is_empty() {
        config.insert("users".into(), Value::Array(users));
    }
    if let Some(ntp) = data.spec.get("ntp").filter(|n| !n.is_null()) {
        let mut out = Map::new();
        if let Some(enabled) = ntp.get("enabled") {
            out.insert("enabled".into(), enabled.clone());
        }
        if let Some(servers) = ntp.get("servers") {
            out.insert("servers".into(), servers.clone());
        }
        config.insert("ntp".into(), Value::Object(out));
    }
    disk_setup(data.spec, &mut config);
    if let Some(mounts) = data
        .spec
        .get("mounts")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
    {
        config.insert("mounts".into(), Value::Array(mounts.clone()));
    }
    let body = to_yaml(&Value::Object(config))?;
    Ok(format!(
        "## template: jinja\n#cloud-config\n{}\n",
        body.trim_start_matches("---").trim_start_matches('\n')
    ))
}

fn to_yaml_node(value: &Value) -> Yaml {
    match value {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Yaml::Real(n.to_string()), Yaml::Integer),
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(items) => Yaml::Array(items.iter().map(to_yaml_node).collect()),
        Value::Object(map) => {
            let mut hash = Hash::new();
            for (k, v) in map {
                hash.insert(Yaml::String(k.clone()), to_yaml_node(v));
            }
            Yaml::Hash(hash)
        }
    }
}

/// `value` as a YAML document (`---` first), multi-line strings as literal blocks. The literal-block
/// form cannot hold every string (leading blanks, for one), so the document is read back and, if
/// anything changed, emitted again with every string quoted.
pub fn to_yaml(value: &Value) -> Result<String, CloudInitError> {
    let node = to_yaml_node(value);
    let readable = emit(&node, true)?;
    let same = yaml_rust2::YamlLoader::load_from_str(&readable)
        .ok()
        .and_then(|mut docs| (docs.len() == 1).then(|| docs.remove(0)))
        .is_some_and(|back| back == node);
    if same {
        Ok(readable)
    } else {
        emit(&node, false)
    }
}

fn emit(node: &Yaml, multiline: bool) -> Result<String, CloudInitError> {
    let mut out = String::new();
    let mut emitter = YamlEmitter::new(&mut out);
    emitter.multiline_strings(multiline);
    emitter
        .dump(node)
        .map_err(|e| CloudInitError::Emit(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{KeyMaterial, generate};
    use crate::kubeadm_api::{ClusterFacts, Discovery, KubeadmApi, init_documents, join_document};
    use yaml_rust2::YamlLoader;

    fn certificates() -> ClusterCertificates {
        let g = |p| generate(p).unwrap();
        ClusterCertificates {
            cluster_ca: g(Purpose::ClusterCa),
            etcd_ca: g(Purpose::EtcdCa),
            front_proxy_ca: g(Purpose::FrontProxyCa),
            service_account: g(Purpose::ServiceAccount),
        }
    }

    fn spec() -> Value {
        json!({
            "preKubeadmCommands": ["sh /etc/kube-vip-prepare.sh", "echo 'quoted' \"twice\""],
            "postKubeadmCommands": ["sh /etc/kube-vip-prepare.sh --restore"],
            "bootCommands": ["echo boot"],
            "users": [{"name": "capstan", "sudo": "ALL=(ALL) NOPASSWD:ALL", "sshAuthorizedKeys": ["ssh-ed25519 AAAA test"], "lockPassword": true}],
            "ntp": {"enabled": true, "servers": ["0.pool.ntp.org"]},
            "diskSetup": {
                "partitions": [{"device": "/dev/sdb", "layout": true, "overwrite": false, "tableType": "gpt"}],
                "filesystems": [{"device": "/dev/sdb1", "filesystem": "ext4", "label": "etcd", "extraOpts": ["-F"]}]
            },
            "mounts": [["LABEL=etcd", "/var/lib/etcd"]],
            "initConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.name }}", "kubeletExtraArgs": [{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}]}, "skipPhases": ["addon/kube-proxy"]},
            "joinConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.name }}", "kubeletExtraArgs": [{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}]}},
        })
    }

    fn facts(version: &str) -> ClusterFacts {
        ClusterFacts {
            cluster_name: "capi-1".into(),
            control_plane_endpoint: "192.0.2.10:6443".into(),
            kubernetes_version: version.into(),
            cluster_network: json!({"pods": {"cidrBlocks": ["10.244.0.0/16"]}}),
        }
    }

    fn discovery() -> Discovery {
        Discovery {
            api_server_endpoint: "192.0.2.10:6443".into(),
            token: "abcdef.0123456789abcdef".into(),
            ca_cert_hash: "sha256:ab".into(),
        }
    }

    fn reporting() -> Reporting {
        Reporting {
            url: "http://127.0.0.1:1/bootstrap/v1/namespaces/ns/kubeadmconfigs/c/steps".into(),
            token: "reporttoken0123456789".into(),
        }
    }

    fn rendered(role: Role, api: KubeadmApi, reporting: Option<Reporting>) -> String {
        let spec = spec();
        let certs = certificates();
        let documents = match role {
            Role::Init => init_documents(&spec, &facts("v1.30.2"), api),
            Role::JoinControlPlane => vec![join_document(&spec, &discovery(), true, api)],
            Role::JoinWorker => vec![join_document(&spec, &discovery(), false, api)],
        };
        render(&BootstrapData {
            role,
            certificates: Some(&certs),
            kubeadm_documents: documents,
            files: vec![WriteFile {
                path: "/etc/demo.conf".into(),
                owner: "root:root".into(),
                permissions: "0644".into(),
                encoding: Some("base64".into()),
                append: false,
                content: "aGVsbG8K".into(),
            }],
            spec: &spec,
            passwords: Vec::new(),
            reporting,
        })
        .unwrap()
    }

    /// The document without its Jinja header, parsed.
    fn parse(config: &str) -> Yaml {
        assert!(
            config.starts_with("## template: jinja\n#cloud-config\n"),
            "{config}"
        );
        YamlLoader::load_from_str(config).unwrap().remove(0)
    }

    fn file<'a>(doc: &'a Yaml, path: &str) -> &'a Yaml {
        doc["write_files"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str() == Some(path))
            .unwrap_or_else(|| panic!("{path} not written"))
    }

    /// `cloud-init schema -c` accepts `config` (cloud-init validates the document after Jinja, so
    /// the Jinja expressions are replaced as a datasource would).
    fn assert_valid_schema(config: &str) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("user-data");
        let rendered = config
            .replacen("## template: jinja\n", "", 1)
            .replace("{{ ds.meta_data.name }}", "node-0")
            .replace("{{ ds.meta_data.uuid }}", "0000");
        std::fs::write(&path, rendered).unwrap();
        let out = std::process::Command::new("cloud-init")
            .args(["schema", "-c"])
            .arg(&path)
            .output()
            .expect("cloud-init is installed");
        assert!(
            out.status.success(),
            "cloud-init schema refused it:\n{}{}\n{config}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn init_v1beta3_layout() {
        let config = rendered(Role::Init, KubeadmApi::V1Beta3, None);
        assert_valid_schema(&config);
        let doc = parse(&config);
        let ca = file(&doc, "/etc/kubernetes/pki/ca.crt");
        assert_eq!(ca["permissions"].as_str(), Some("0640"));
        assert!(
            ca["content"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert_eq!(
            file(&doc, "/etc/kubernetes/pki/ca.key")["permissions"].as_str(),
            Some("0600")
        );
        for path in [
            "/etc/kubernetes/pki/etcd/ca.key",
            "/etc/kubernetes/pki/front-proxy-ca.key",
            "/etc/kubernetes/pki/sa.key",
        ] {
            assert_eq!(
                file(&doc, path)["permissions"].as_str(),
                Some("0600"),
                "{path}"
            );
        }
        assert_eq!(
            file(&doc, "/etc/demo.conf")["encoding"].as_str(),
            Some("b64")
        );
        let kubeadm = file(&doc, INIT_CONFIG_PATH)["content"]
            .as_str()
            .unwrap()
            .to_owned();
        let docs = YamlLoader::load_from_str(&kubeadm).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"].as_str(), Some("ClusterConfiguration"));
        assert_eq!(
            docs[0]["apiVersion"].as_str(),
            Some("kubeadm.k8s.io/v1beta3")
        );
        assert_eq!(docs[1]["kind"].as_str(), Some("InitConfiguration"));
        assert_eq!(
            docs[1]["nodeRegistration"]["kubeletExtraArgs"]["node-labels"].as_str(),
            Some("metal3.io/uuid={{ ds.meta_data.uuid }}")
        );
        assert_eq!(docs[1]["skipPhases"][0].as_str(), Some("addon/kube-proxy"));
        let runcmd: Vec<&str> = doc["runcmd"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(
            runcmd,
            [
                "sh /etc/kube-vip-prepare.sh",
                "echo 'quoted' \"twice\"",
                "kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete",
                "sh /etc/kube-vip-prepare.sh --restore",
            ]
        );
        assert_eq!(doc["users"][0]["name"].as_str(), Some("capstan"));
        assert_eq!(doc["users"][0]["lock_passwd"].as_bool(), Some(true));
        assert_eq!(doc["ntp"]["servers"][0].as_str(), Some("0.pool.ntp.org"));
        assert_eq!(
            doc["disk_setup"]["/dev/sdb"]["table_type"].as_str(),
            Some("gpt")
        );
        assert_eq!(doc["fs_setup"][0]["label"].as_str(), Some("etcd"));
        assert_eq!(doc["mounts"][0][1].as_str(), Some("/var/lib/etcd"));
        assert_eq!(doc["bootcmd"][0].as_str(), Some("echo boot"));
        assert!(!config.contains(STEP_RUNNER_PATH));
    }

    #[test]
    fn join_v1beta4_layout() {
        let config = rendered(Role::JoinControlPlane, KubeadmApi::V1Beta4, None);
        assert_valid_schema(&config);
        let doc = parse(&config);
        assert!(
            file(&doc, "/etc/kubernetes/pki/sa.pub")["content"]
                .as_str()
                .unwrap()
                .contains("PUBLIC KEY")
        );
        let join =
            YamlLoader::load_from_str(file(&doc, JOIN_CONFIG_PATH)["content"].as_str().unwrap())
                .unwrap();
        assert_eq!(join.len(), 1);
        assert_eq!(
            join[0]["apiVersion"].as_str(),
            Some("kubeadm.k8s.io/v1beta4")
        );
        assert_eq!(join[0]["kind"].as_str(), Some("JoinConfiguration"));
        assert_eq!(
            join[0]["nodeRegistration"]["kubeletExtraArgs"][0]["name"].as_str(),
            Some("node-labels")
        );
        assert!(join[0]["controlPlane"].as_hash().is_some());
        assert_eq!(
            join[0]["discovery"]["bootstrapToken"]["caCertHashes"][0].as_str(),
            Some("sha256:ab")
        );
        assert!(doc["runcmd"][2].as_str().unwrap().starts_with(
            "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success"
        ));
    }

    #[test]
    fn workers_get_no_keys() {
        let config = rendered(Role::JoinWorker, KubeadmApi::V1Beta4, None);
        assert_valid_schema(&config);
        assert!(!config.contains("PRIVATE KEY"));
        let doc = parse(&config);
        let join =
            YamlLoader::load_from_str(file(&doc, JOIN_CONFIG_PATH)["content"].as_str().unwrap())
                .unwrap();
        assert!(join[0]["controlPlane"].is_badvalue());
    }

    #[test]
    fn reporting_wraps_every_command() {
        let config = rendered(Role::Init, KubeadmApi::V1Beta4, Some(reporting()));
        assert_valid_schema(&config);
        let doc = parse(&config);
        let runner = file(&doc, STEP_RUNNER_PATH);
        assert_eq!(runner["permissions"].as_str(), Some("0700"));
        assert!(
            runner["content"]
                .as_str()
                .unwrap()
                .contains("reporttoken0123456789")
        );
        // Each report carries its number in the node's order: start 2N-1, end 2N.
        let runner_content = runner["content"].as_str().unwrap();
        assert_eq!(runner_content.matches("X-Capstan-Sequence: $4").count(), 2);
        assert!(runner_content.contains("report started 0 /dev/null $((index * 2 - 1))"));
        assert!(runner_content.contains("report failed \"$status\" \"$log.tail\" $((index * 2))"));
        let runcmd = doc["runcmd"].as_vec().unwrap();
        assert_eq!(runcmd.len(), 4);
        for (index, step) in runcmd.iter().enumerate() {
            let step = step.as_vec().unwrap();
            assert_eq!(step[0].as_str(), Some("sh"));
            assert_eq!(step[1].as_str(), Some(STEP_RUNNER_PATH));
            assert_eq!(step[2].as_str(), Some((index + 1).to_string().as_str()));
            assert_eq!(step[3].as_str(), Some("4"));
        }
        assert_eq!(runcmd[1][4].as_str(), Some("echo 'quoted' \"twice\""));
        // Nothing of capstan's own would be taken for Jinja.
        let runner_text = runner["content"].as_str().unwrap();
        for jinja in ["{{", "{%", "{#"] {
            assert!(!runner_text.contains(jinja), "{jinja}");
        }
        assert!(!format!("{:?}", reporting()).contains("reporttoken"));
    }

    #[test]
    fn literal_blocks_round_trip() {
        let value =
            json!({"a": "line one\nline two\n", "b": "no newline at end\nx", "c": "  leading\n"});
        let text = to_yaml(&value).unwrap();
        let back = YamlLoader::load_from_str(&text).unwrap().remove(0);
        for key in ["a", "b", "c"] {
            assert_eq!(back[key].as_str(), value[key].as_str(), "{key}: {text}");
        }
        let _ = KeyMaterial {
            cert: String::new(),
            key: String::new(),
        };
    }
}
