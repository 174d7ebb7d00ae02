//! Connecting to an API server (capstan's own or a real cluster) and finding resources by the names
//! people type (`bmh`, `baremetalhosts`, `BareMetalHost`, `kcp`, `clusters.cluster.x-k8s.io`).

use anyhow::{Context, anyhow};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where the kubeconfig comes from: `--kubeconfig`, then `$KUBECONFIG`, then `<data-dir>/kubeconfig`.
pub fn kubeconfig_path(explicit: Option<&Path>, data_dir: &Path) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from))
        .unwrap_or_else(|| data_dir.join("kubeconfig"))
}

/// The default data directory: `$CAPSTAN_DATA_DIR`, else `$HOME/.local/share/capstan`.
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("CAPSTAN_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join(".local/share/capstan")
        })
}

/// Connection options shared by the client verbs (`apply`, `get`, `describe`, `delete`).
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// Kubeconfig (default: `$KUBECONFIG`, then the data directory's).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The data directory of `capstan serve`.
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

impl ConnectArgs {
    /// The kubeconfig these options name.
    pub fn kubeconfig(&self) -> PathBuf {
        kubeconfig_path(
            self.kubeconfig.as_deref(),
            &self.data_dir.clone().unwrap_or_else(default_data_dir),
        )
    }

    /// Connects and runs `work` with the client on a single-threaded runtime.
    pub fn run<T, F, Fut>(&self, work: F) -> anyhow::Result<T>
    where
        F: FnOnce(kube::Client) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let kubeconfig = self.kubeconfig();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(async {
            let client = connect(&kubeconfig).await?;
            work(client).await
        })
    }
}

/// A client from a kubeconfig file.
pub async fn connect(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).with_context(|| {
        format!(
            "reading kubeconfig {} (is `capstan serve` running?)",
            kubeconfig.display()
        )
    })?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(config, &options)
        .await
        .with_context(|| format!("using kubeconfig {}", kubeconfig.display()))?;
    kube::Client::try_from(config).context("building the API client")
}

/// A resource as discovery describes it.
#[derive(Clone, Debug)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl Resource {
    /// The URL path of a collection or object.
    pub fn path(&self, namespace: Option<&str>, name: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        let mut path = match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{base}/namespaces/{ns}/{}", self.plural),
            _ => format!("{base}/{}", self.plural),
        };
        if let Some(name) = name {
            path.push('/');
            path.push_str(name);
        }
        path
    }

    /// `group/version` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// GETs a path and parses JSON; API errors become their `Status` message.
pub async fn get_json(
    client: &kube::Client,
    path: &str,
    accept: Option<&str>,
) -> anyhow::Result<Value> {
    let mut request = http::Request::get(path);
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    let request = request.body(Vec::new()).context("building the request")?;
    let text = client.request_text(request).await.map_err(api_error)?;
    serde_json::from_str(&text).context("the server answered with something that is not JSON")
}

/// Turns a kube error into a message a person can act on.
pub fn api_error(err: kube::Error) -> anyhow::Error {
    match err {
        kube::Error::Api(status) => anyhow!("{} ({})", status.message, status.reason),
        other => anyhow!(other),
    }
}

/// Every served resource, from discovery.
pub async fn discover(
    client: &kube::Client,
) -> anyhow::Result<Vec<(Resource, Vec<String>, String)>> {
    let mut lists = vec![get_json(client, "/api/v1", None).await?];
    let groups = get_json(client, "/apis", None).await?;
    for group in groups["groups"].as_array().into_iter().flatten() {
        if let Some(gv) = group["preferredVersion"]["groupVersion"].as_str() {
            lists.push(get_json(client, &format!("/apis/{gv}"), None).await?);
        }
    }
    let mut out = Vec::new();
    for list in lists {
        let gv = list["groupVersion"].as_str().unwrap_or("v1");
        let (group, version) = gv.rsplit_once('/').map_or(("", gv), |(g, v)| (g, v));
        for r in list["resources"].as_array().into_iter().flatten() {
            let Some(plural) = r["name"].as_str().filter(|n| !n.contains('/')) else {
                continue;
            };
            let short: Vec<String> = r["shortNames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect();
            out.push((
                Resource {
                    group: group.to_owned(),
                    version: version.to_owned(),
                    kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                    plural: plural.to_owned(),
                    namespaced: r["namespaced"].as_bool().unwrap_or(true),
                },
                short,
                r["singularName"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    Ok(out)
}

/// Finds the resource a person named.
pub async fn resolve(client: &kube::Client, name: &str) -> anyhow::Result<Resource> {
    let lower = name.to_ascii_lowercase();
    let (short, group) = lower
        .split_once('.')
        .map_or((lower.as_str(), None), |(s, g)| (s, Some(g)));
    let all = discover(client).await?;
    let found = all.into_iter().find(|(r, shorts, singular)| {
        group.is_none_or(|g| r.group == g)
            && (r.plural == short
                || singular == short
                || r.kind.to_ascii_lowercase() == short
                || shorts.iter().any(|s| s == short))
    });
    found.map(|(r, _, _)| r).ok_or_else(|| {
        anyhow!("the server does not serve {name:?}; `kubectl api-resources` lists what it serves")
    })
}

/// Finds the resource of an object's `apiVersion` and `kind`.
pub async fn resolve_kind(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<Resource> {
    let (group, version) = api_version
        .rsplit_once('/')
        .map_or(("", api_version), |(g, v)| (g, v));
    let path = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let list = get_json(client, &path, None)
        .await
        .with_context(|| format!("the server does not serve {api_version}"))?;
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["kind"] == kind && r["name"].as_str().is_some_and(|n| !n.contains('/')))
        .map(|r| Resource {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: r["name"].as_str().unwrap_or_default().to_owned(),
            namespaced: r["namespaced"].as_bool().unwrap_or(true),
        })
        .ok_or_else(|| anyhow!("the server does not serve {kind} in {api_version}"))
}
