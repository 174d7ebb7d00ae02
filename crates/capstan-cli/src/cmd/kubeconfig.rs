//! `capstan kubeconfig [CLUSTER]`: prints the admin kubeconfig `capstan serve` wrote, or, given a
//! Cluster's name, that workload cluster's admin kubeconfig (Secret `<cluster>-kubeconfig`, key
//! `value`). For a cluster the simulated backend plays, the server is rewritten to the loopback URL
//! of its simulated API (annotation `sim.capstan.io/api-url` on the Cluster), so kubectl reaches it.

use crate::output::Exit;
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
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::client::default_data_dir);
    let Some(cluster) = args.cluster.clone() else {
        let path = data_dir.join("kubeconfig");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (has `capstan serve` been started with this data directory?)",
                path.display()
            )
        })?;
        print!("{text}");
        return Ok(Exit::Ok);
    };
    let management = crate::client::kubeconfig_path(args.kubeconfig.as_deref(), &data_dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let text = runtime.block_on(workload_kubeconfig(&management, &args.namespace, &cluster))?;
    print!("{text}");
    Ok(Exit::Ok)
}

async fn workload_kubeconfig(
    management: &std::path::Path,
    namespace: &str,
    cluster: &str,
) -> anyhow::Result<String> {
    let client = crate::client::connect(management).await?;
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
