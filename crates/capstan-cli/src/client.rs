//! Connecting to an API server (capstan's own or a real cluster) and finding resources by the names
//! people type (`bmh`, `baremetalhosts`, `BareMetalHost`, `kcp`, `clusters.cluster.x-k8s.io`).
//!
//! Which kubeconfig: flags before the environment, the more specific before the less —
//! `--kubeconfig`, `--data-dir`, `$KUBECONFIG`, `$CAPSTAN_DATA_DIR`, then the default data
//! directory. When a setting that was given loses to another, a warning says which one is used.

use crate::stderr::errln;
use anyhow::{Context, anyhow};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Failures talking to the API server that the exit code and the message distinguish.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error Status.
    #[error("{message} ({reason})")]
    Api {
        code: u16,
        message: String,
        reason: String,
        /// The fields the server named (`spec.online`), for pointing at their lines.
        fields: Vec<String>,
    },
    /// Nothing answered at the server's address.
    #[error(
        "cannot connect to the API server at {server} ({cause}); is `capstan serve` running? (kubeconfig: {kubeconfig})"
    )]
    Unreachable {
        server: String,
        kubeconfig: String,
        cause: String,
    },
}

impl ClientError {
    /// Whether the server said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { code: 404, .. })
    }
}

/// Where a client verb's kubeconfig comes from and why; see the module documentation.
#[derive(Debug, PartialEq, Eq)]
pub struct KubeconfigChoice {
    pub path: PathBuf,
    /// Said on stderr when a setting that was given is not the one used.
    pub warning: Option<String>,
}

/// Chooses the kubeconfig from the flags and the environment (`KUBECONFIG`, `CAPSTAN_DATA_DIR`).
pub fn choose_kubeconfig(
    flag_kubeconfig: Option<&Path>,
    flag_data_dir: Option<&Path>,
    env_kubeconfig: Option<PathBuf>,
    env_data_dir: Option<PathBuf>,
) -> KubeconfigChoice {
    let env_kubeconfig = env_kubeconfig.filter(|p| !p.as_os_str().is_empty());
    let env_data_dir = env_data_dir.filter(|p| !p.as_os_str().is_empty());
    if let Some(path) = flag_kubeconfig {
        return KubeconfigChoice {
            path: path.to_path_buf(),
            warning: None,
        };
    }
    if let Some(dir) = flag_data_dir {
        let path = dir.join("kubeconfig");
        let warning = env_kubeconfig.map(|env| {
            format!(
                "using {} from --data-dir, not $KUBECONFIG ({})",
                path.display(),
                env.display()
            )
        });
        return KubeconfigChoice { path, warning };
    }
    if let Some(path) = env_kubeconfig {
        let warning = env_data_dir.map(|dir| {
            format!(
                "using $KUBECONFIG ({}), not the kubeconfig in $CAPSTAN_DATA_DIR ({}); pass --data-dir to use that",
                path.display(),
                dir.display()
            )
        });
        return KubeconfigChoice { path, warning };
    }
    KubeconfigChoice {
        path: env_data_dir
            .unwrap_or_else(default_data_dir_of_home)
            .join("kubeconfig"),
        warning: None,
    }
}

/// `$HOME/.local/share/capstan`.
fn default_data_dir_of_home() -> PathBuf {
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join(".local/share/capstan")
}

/// The data directory of the packaged service (`capstan.service` runs `capstan serve` there).
pub const SYSTEM_DATA_DIR: &str = "/var/lib/capstan";

/// The default data directory: `$CAPSTAN_DATA_DIR`, else `$HOME/.local/share/capstan` when it
/// exists, else the packaged service's `/var/lib/capstan` when that has a kubeconfig (so that
/// `sudo capstan kubeconfig` and `sudo capstan get bmh` work on a host where the .deb runs the
/// service), else `$HOME/.local/share/capstan`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    choose_default_data_dir(default_data_dir_of_home(), Path::new(SYSTEM_DATA_DIR))
}

fn choose_default_data_dir(home: PathBuf, system: &Path) -> PathBuf {
    if !home.exists() && system.join("kubeconfig").is_file() {
        system.to_owned()
    } else {
        home
    }
}

/// Connection options shared by the client verbs (`apply`, `get`, `describe`, `delete`).
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// Kubeconfig (default: the data directory's when `--data-dir` is given, else `$KUBECONFIG`,
    /// else the one in `$CAPSTAN_DATA_DIR` or `~/.local/share/capstan`).
    #[arg(long, conflicts_with = "data_dir")]
    pub kubeconfig: Option<PathBuf>,
    /// The data directory of `capstan serve`: use its kubeconfig (wins over `$KUBECONFIG`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl ConnectArgs {
    /// The kubeconfig these options and the environment name; warns when a given setting loses.
    pub fn kubeconfig(&self) -> PathBuf {
        let choice = choose_kubeconfig(
            self.kubeconfig.as_deref(),
            self.data_dir.as_deref(),
            std::env::var_os("KUBECONFIG").map(PathBuf::from),
            std::env::var_os("CAPSTAN_DATA_DIR").map(PathBuf::from),
        );
        if let Some(warning) = &choice.warning {
            errln!("warning: {warning}");
        }
        choice.path
    }

    /// Connects and runs `work` with the client on a single-threaded runtime. A server that does
    /// not answer becomes one [`ClientError::Unreachable`].
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
            let (client, server) = connect(&kubeconfig).await?;
            work(client)
                .await
                .map_err(|err| unreachable_or(err, &server, &kubeconfig))
        })
    }
}

/// `err` as [`ClientError::Unreachable`] when the connection itself failed (refused, no route,
/// timed out), else unchanged.
fn unreachable_or(err: anyhow::Error, server: &str, kubeconfig: &Path) -> anyhow::Error {
    use std::io::ErrorKind;
    let cause = err.chain().find_map(|e| {
        e.downcast_ref::<std::io::Error>()
            .filter(|io| {
                matches!(
                    io.kind(),
                    ErrorKind::ConnectionRefused
                        | ErrorKind::HostUnreachable
                        | ErrorKind::NetworkUnreachable
                        | ErrorKind::TimedOut
                        | ErrorKind::AddrNotAvailable
                )
            })
            .map(|io| io.kind().to_string())
    });
    match cause {
        Some(cause) => ClientError::Unreachable {
            server: server.to_owned(),
            kubeconfig: kubeconfig.display().to_string(),
            cause,
        }
        .into(),
        None => err,
    }
}

/// The text of the last error in `err`'s source chain.
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// A client from a kubeconfig file, and the server URL it talks to.
pub async fn connect(kubeconfig: &Path) -> anyhow::Result<(kube::Client, String)> {
    // One line: the kube error's own text repeats its source, so only the innermost cause is shown.
    let config = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|err| {
        anyhow!(
            "cannot read kubeconfig {}: {}; is `capstan serve` running? (it writes one into its data directory)",
            kubeconfig.display(),
            innermost(&err)
        )
    })?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(config, &options)
        .await
        .with_context(|| format!("using kubeconfig {}", kubeconfig.display()))?;
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("building the API client")?;
    Ok((client, server))
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

    /// How kubectl names the resource in `-o name` and apply's output: `baremetalhost.metal3.io`,
    /// `configmap`.
    pub fn kind_and_group(&self) -> String {
        let kind = self.kind.to_ascii_lowercase();
        if self.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.group)
        }
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

/// Turns a kube error into a message a person can act on; a Status becomes [`ClientError::Api`].
pub fn api_error(err: kube::Error) -> anyhow::Error {
    match err {
        kube::Error::Api(status) => {
            let mut fields: Vec<String> = status
                .details
                .iter()
                .flat_map(|d| d.causes.iter())
                .map(|c| c.field.clone())
                .filter(|f| !f.is_empty())
                .collect();
            fields.extend(unknown_fields(&status.message));
            ClientError::Api {
                code: status.code,
                message: status.message,
                reason: status.reason,
                fields,
            }
            .into()
        }
        other => anyhow!(other),
    }
}

/// The paths in a strict decoding error's `unknown field "spec.onlin"` phrases.
fn unknown_fields(message: &str) -> Vec<String> {
    message
        .split("unknown field \"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(field, _)| field.to_owned()))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn the_packaged_services_data_dir_is_the_default_only_without_a_home_one() {
        #![allow(clippy::unwrap_used)]
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home/.local/share/capstan");
        let system = dir.path().join("var/lib/capstan");
        // Neither exists: the home directory (where `capstan serve` will create it).
        assert_eq!(choose_default_data_dir(home.clone(), &system), home);
        // The service has run: its directory, found by its kubeconfig.
        std::fs::create_dir_all(&system).unwrap();
        std::fs::write(system.join("kubeconfig"), "").unwrap();
        assert_eq!(choose_default_data_dir(home.clone(), &system), system);
        // A user's own `capstan serve` wins.
        std::fs::create_dir_all(&home).unwrap();
        assert_eq!(choose_default_data_dir(home.clone(), &system), home);
    }

    #[test]
    fn flags_win_over_the_environment_and_say_so() {
        let flag = choose_kubeconfig(None, Some(Path::new("/d")), Some(p("/env/kc")), None);
        assert_eq!(flag.path, p("/d/kubeconfig"));
        assert!(flag.warning.is_some_and(|w| w.contains("$KUBECONFIG")));
        let explicit = choose_kubeconfig(Some(Path::new("/k")), None, Some(p("/env/kc")), None);
        assert_eq!(
            explicit,
            KubeconfigChoice {
                path: p("/k"),
                warning: None
            }
        );
    }

    #[test]
    fn kubeconfig_env_wins_over_the_data_dir_env_and_says_so() {
        let env = choose_kubeconfig(None, None, Some(p("/env/kc")), Some(p("/dd")));
        assert_eq!(env.path, p("/env/kc"));
        assert!(env.warning.is_some_and(|w| w.contains("--data-dir")));
        let quiet = choose_kubeconfig(None, None, Some(p("/env/kc")), None);
        assert_eq!(quiet.warning, None);
        let data = choose_kubeconfig(None, None, None, Some(p("/dd")));
        assert_eq!(data.path, p("/dd/kubeconfig"));
        let empty = choose_kubeconfig(None, None, Some(p("")), Some(p("/dd")));
        assert_eq!(empty.path, p("/dd/kubeconfig"));
    }

    #[test]
    fn unknown_fields_are_found_in_strict_decoding_errors() {
        assert_eq!(
            unknown_fields(
                r#"strict decoding error: unknown field "spec.onlin", unknown field "spec.x""#
            ),
            vec!["spec.onlin".to_owned(), "spec.x".to_owned()]
        );
        assert!(unknown_fields("conflict").is_empty());
    }
}
