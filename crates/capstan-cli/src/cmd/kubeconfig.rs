//! `capstan kubeconfig [CLUSTER]`: prints the admin kubeconfig `capstan serve` wrote, or, given a
//! Cluster's name, that workload cluster's admin kubeconfig (Secret `<cluster>-kubeconfig`, key
//! `value`). With `--user NAME` it issues a least-privilege kubeconfig instead: a client
//! certificate for that user (and `--group`s) signed by the server's CA, with what `--role` grants
//! in `--namespace` (a RoleBinding) or everywhere (`--cluster-wide`, a ClusterRoleBinding) and
//! nothing else. For a cluster the simulated backend plays, the server is rewritten to the loopback URL
//! of its simulated API (annotation `sim.capstan.io/api-url` on the Cluster), so kubectl reaches it.

use crate::output::Exit;
use crate::output::out;
use anyhow::{Context, anyhow};
use std::path::PathBuf;

/// Arguments of `capstan kubeconfig`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The data directory of `capstan serve`.
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// A workload Cluster whose kubeconfig to print (instead of capstan's own).
    cluster: Option<String>,
    /// The Cluster's namespace.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// Kubeconfig of the management API (default: `$KUBECONFIG`, then the data directory's).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Issue a kubeconfig for this user (a client certificate signed by the server's CA, read
    /// from the data directory) instead of printing the admin's.
    #[arg(long, conflicts_with = "cluster")]
    user: Option<String>,
    /// A group of the user (repeatable); RBAC bindings may name it.
    #[arg(long = "group", requires = "user")]
    groups: Vec<String>,
    /// Bind this ClusterRole (`view`, `edit`, `admin`, …) to the user in `--namespace`.
    #[arg(long, requires = "user")]
    role: Option<String>,
    /// Bind `--role` everywhere (a ClusterRoleBinding) rather than in `--namespace`.
    #[arg(long, requires = "role")]
    cluster_wide: bool,
    /// How long the certificate is valid, in days.
    #[arg(long, default_value_t = 365, requires = "user")]
    days: i64,
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::client::default_data_dir);
    if let Some(user) = args.user.clone() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let text = runtime.block_on(user_kubeconfig(&args, &data_dir, &user))?;
        out!("{text}");
        return Ok(Exit::Ok);
    }
    let Some(cluster) = args.cluster.clone() else {
        let path = data_dir.join("kubeconfig");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (has `capstan serve` been started with this data directory?)",
                path.display()
            )
        })?;
        out!("{text}");
        return Ok(Exit::Ok);
    };
    let management = crate::client::ConnectArgs {
        kubeconfig: args.kubeconfig.clone(),
        data_dir: args.data_dir.clone(),
    }
    .kubeconfig();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let text = runtime.block_on(workload_kubeconfig(&management, &args.namespace, &cluster))?;
    out!("{text}");
    Ok(Exit::Ok)
}

async fn workload_kubeconfig(
    management: &std::path::Path,
    namespace: &str,
    cluster: &str,
) -> anyhow::Result<String> {
    let (client, _) = crate::client::connect(management).await?;
    let secret_name = format!("{cluster}-kubeconfig");
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(crate::client::api_error)?
        .ok_or_else(|| {
            anyhow!(
                "Secret {namespace}/{secret_name} does not exist: the cluster's control plane has \
                 not written its kubeconfig yet (see `capstan describe cluster {cluster}`)"
            )
        })?;
    let value = secret
        .data
        .and_then(|d| d.get("value").cloned())
        .ok_or_else(|| anyhow!("Secret {namespace}/{secret_name} has no key `value`"))?;
    let text = String::from_utf8(value.0)
        .map_err(|_| anyhow!("Secret {namespace}/{secret_name} does not hold text"))?;
    let resource = kube::api::ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let clusters: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client, namespace, &resource);
    let url = clusters
        .get_opt(cluster)
        .await
        .map_err(crate::client::api_error)?
        .and_then(|c| {
            c.metadata
                .annotations?
                .get(capstan_sim::listener::ANNOTATION_API_URL)
                .cloned()
        });
    Ok(match url {
        Some(url) => with_server(&text, &url),
        None => text,
    })
}

/// Issues `user`'s certificate and kubeconfig, and binds `--role` to the user when asked.
async fn user_kubeconfig(
    args: &Args,
    data_dir: &std::path::Path,
    user: &str,
) -> anyhow::Result<String> {
    if user.is_empty() || user.starts_with("system:") {
        return Err(anyhow!(
            "--user {user:?}: give a plain user name (names starting with system: are Kubernetes' own)"
        ));
    }
    let admin_path = data_dir.join("kubeconfig");
    let admin = kube::config::Kubeconfig::read_from(&admin_path).with_context(|| {
        format!(
            "reading {} (has `capstan serve` been started with this data directory?)",
            admin_path.display()
        )
    })?;
    let server = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .ok_or_else(|| anyhow!("{} names no server", admin_path.display()))?;
    let pki = data_dir.join("pki");
    let ca = std::fs::read_to_string(pki.join("ca.crt"))
        .with_context(|| format!("reading {}", pki.join("ca.crt").display()))?;
    if let Some(role) = &args.role {
        let (client, _) = crate::client::connect(&admin_path).await?;
        bind(
            client,
            user,
            role,
            (!args.cluster_wide).then_some(args.namespace.as_str()),
        )
        .await?;
    }
    let (cert, key) =
        capstan_apiserver::tls::issue_client_certificate(&pki, user, &args.groups, args.days)
            .context("issuing the client certificate")?;
    Ok(capstan_apiserver::tls::certificate_kubeconfig(
        &server,
        &ca,
        user,
        &cert,
        &key,
        &args.namespace,
    ))
}

/// Binds ClusterRole `role` to User `user` in `namespace`, or everywhere; idempotent.
async fn bind(
    client: kube::Client,
    user: &str,
    role: &str,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    let name = format!("capstan:user:{user}:{role}");
    let body = serde_json::json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    let params = kube::api::PatchParams::apply("capstan-kubeconfig");
    match namespace {
        Some(namespace) => {
            let mut body = body;
            body["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
            body["kind"] = "RoleBinding".into();
            let api: kube::Api<RoleBinding> = kube::Api::namespaced(client, namespace);
            api.patch(&name, &params, &kube::api::Patch::Apply(body))
                .await
                .map_err(crate::client::api_error)?;
        }
        None => {
            let mut body = body;
            body["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
            body["kind"] = "ClusterRoleBinding".into();
            let api: kube::Api<ClusterRoleBinding> = kube::Api::all(client);
            api.patch(&name, &params, &kube::api::Patch::Apply(body))
                .await
                .map_err(crate::client::api_error)?;
        }
    }
    Ok(())
}

/// `text` with every `server:` set to `url`.
fn with_server(text: &str, url: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("server:") {
            let indent = &line[..line.len() - trimmed.len()];
            out.push_str(&format!("{indent}server: {url}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_rewritten_and_nothing_else() {
        let text = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: QUJD\n    server: https://192.0.2.10:6443\n  name: c1\n";
        let out = with_server(text, "https://127.0.0.1:40001");
        assert!(
            out.contains("    server: https://127.0.0.1:40001\n"),
            "{out}"
        );
        assert!(out.contains("certificate-authority-data: QUJD"));
        assert!(!out.contains("192.0.2.10"));
    }
}
