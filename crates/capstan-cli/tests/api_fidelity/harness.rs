//! The differential harness behind `api_fidelity.rs`: one [`Battery`] holds a kube-rs client for
//! each of two real servers (kube-apiserver 1.35 and `capstan serve`), sends every request to both
//! in the same order, normalises what is expected to differ between any two servers (uids,
//! timestamps, resourceVersions, continue tokens, generated names, managedFields times, ages in
//! Tables, server addresses) and records each remaining difference as (area, request, JSON
//! pointer). [`Battery::finish`] compares them with the checked-in list of known differences.
//!
//! What is compared for each request: the status code, the `Content-Type` (without parameters
//! other than those that select a representation), the `Warning` headers and the whole body, JSON
//! or text. Nothing here knows what either server should answer: kube-apiserver's answer is the
//! reference.

use kube::client::Body;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Which server; index into the pair of replies.
pub const KUBE: usize = 0;
pub const CAPSTAN: usize = 1;
const PEERS: [&str; 2] = ["kube-apiserver", "capstan"];

/// One request of the battery. `path` and string values of `body` may name a per-server variable
/// as `{{name}}` (a resourceVersion or continue token each server handed out, see
/// [`Battery::capture`]), substituted before sending.
pub struct Request {
    pub method: http::Method,
    pub path: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub body: Option<Value>,
    pub no_user_agent: bool,
}

impl Request {
    pub fn new(method: http::Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            content_type: None,
            accept: None,
            body: None,
            no_user_agent: false,
        }
    }

    /// Sends no User-Agent (the field manager is then the server's default).
    pub fn without_user_agent(mut self) -> Self {
        self.no_user_agent = true;
        self
    }

    pub fn body(mut self, content_type: &str, body: Value) -> Self {
        self.content_type = Some(content_type.to_owned());
        self.body = Some(body);
        self
    }

    pub fn accept(mut self, accept: &str) -> Self {
        self.accept = Some(accept.to_owned());
        self
    }
}

/// What one server answered, as compared: `{"code", "contentType", "warnings", "body"}`.
#[derive(Clone, Debug)]
pub struct Reply {
    pub code: u16,
    /// The body as sent (before normalisation), for captures and conditions.
    pub body: Value,
    pub compared: Value,
}

/// One difference: where, and the two values (absent on one side is `None`).
#[derive(Clone, Debug)]
pub struct Difference {
    pub area: String,
    pub request: String,
    pub path: String,
    pub kube: Option<Value>,
    pub capstan: Option<Value>,
}

pub struct Battery {
    runtime: tokio::runtime::Runtime,
    clients: [kube::Client; 2],
    vars: [BTreeMap<String, String>; 2],
    /// Per server: values it generated (names from generateName) and their placeholder, replaced
    /// wherever they appear in its later answers (a NotFound message names the object).
    generated: [Vec<(String, String)>; 2],
    area: String,
    requests: BTreeSet<(String, String)>,
    pub differences: Vec<Difference>,
}

impl Battery {
    /// A battery against the servers of `kube` and `capstan` (their admin kubeconfigs).
    pub fn new(kube: &Path, capstan: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = |path: &Path| {
            runtime.block_on(async {
                let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
                let config = kube::Config::from_custom_kubeconfig(
                    kubeconfig,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .unwrap();
                kube::Client::try_from(config).unwrap()
            })
        };
        let clients = [client(kube), client(capstan)];
        Self {
            runtime,
            clients,
            vars: Default::default(),
            generated: Default::default(),
            area: String::new(),
            requests: BTreeSet::new(),
            differences: Vec::new(),
        }
    }

    /// The area the following requests are counted under.
    pub fn area(&mut self, area: &str) {
        self.area = area.to_owned();
    }

    fn substitute(&self, peer: usize, text: &str, encode: bool) -> String {
        let mut out = text.to_owned();
        for (name, value) in &self.vars[peer] {
            let value = if encode {
                percent_encode(value)
            } else {
                value.clone()
            };
            out = out.replace(&format!("{{{{{name}}}}}"), &value);
        }
        out
    }

    fn substitute_value(&self, peer: usize, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.substitute(peer, s, false)),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.substitute_value(peer, v))
                    .collect(),
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.substitute_value(peer, v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Sends `request` to one server without comparing (setup and polling).
    pub fn send_one(&self, peer: usize, request: &Request) -> Reply {
        let path = self.substitute(peer, &request.path, true);
        let mut builder = http::Request::builder()
            .method(request.method.clone())
            .uri(&path);
        // A fixed User-Agent, so that both servers name the same field manager ("api-fidelity")
        // in every managedFields entry; `no_user_agent` measures the default.
        if !request.no_user_agent {
            builder = builder.header(http::header::USER_AGENT, "api-fidelity/v1.0 (linux/amd64)");
        }
        if let Some(accept) = &request.accept {
            builder = builder.header(http::header::ACCEPT, accept);
        } else {
            builder = builder.header(http::header::ACCEPT, "application/json");
        }
        let body = match &request.body {
            Some(body) => {
                builder = builder.header(
                    http::header::CONTENT_TYPE,
                    request
                        .content_type
                        .as_deref()
                        .unwrap_or("application/json"),
                );
                Body::from(serde_json::to_vec(&self.substitute_value(peer, body)).unwrap())
            }
            None => Body::empty(),
        };
        let http_request = builder.body(body).unwrap();
        let client = self.clients[peer].clone();
        let (code, content_type, warnings, bytes) = self.runtime.block_on(async move {
            let response = client
                .send(http_request)
                .await
                .unwrap_or_else(|e| panic!("{} {path} to {}: {e}", "request", PEERS[peer]));
            let code = response.status().as_u16();
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            let warnings: Vec<Value> = response
                .headers()
                .get_all("warning")
                .iter()
                .map(|v| Value::String(v.to_str().unwrap_or_default().to_owned()))
                .collect();
            let bytes = response.into_body().collect_bytes().await.unwrap();
            (code, content_type, warnings, bytes)
        });
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        let mut compared = json!({
            "code": code,
            "contentType": content_type,
            "warnings": warnings,
            "body": body.clone(),
        });
        normalise(&mut compared["body"]);
        for (value, placeholder) in &self.generated[peer] {
            replace_strings(&mut compared["body"], value, placeholder);
        }
        Reply {
            code,
            body,
            compared,
        }
    }

    /// Sends `request` to both servers (kube-apiserver first), records the differences under the
    /// current area and `id` (unique within the area), and returns both replies.
    pub fn send(&mut self, id: &str, request: Request) -> [Reply; 2] {
        self.send_viewed(id, request, |_| {})
    }

    /// [`Self::send`], comparing only what `view` leaves of each normalised body (discovery:
    /// the groups and resources both servers serve).
    pub fn send_viewed(
        &mut self,
        id: &str,
        request: Request,
        view: impl Fn(&mut Value),
    ) -> [Reply; 2] {
        assert!(
            self.requests.insert((self.area.clone(), id.to_owned())),
            "request id {id:?} used twice in area {:?}",
            self.area
        );
        let mut replies = [
            self.send_one(KUBE, &request),
            self.send_one(CAPSTAN, &request),
        ];
        for reply in &mut replies {
            view(&mut reply.compared["body"]);
        }
        let mut found = Vec::new();
        diff(
            "",
            Some(&replies[KUBE].compared),
            Some(&replies[CAPSTAN].compared),
            &mut found,
        );
        let mut paths = BTreeSet::new();
        for (path, kube, capstan) in found {
            if !paths.insert(path.clone()) {
                continue;
            }
            self.differences.push(Difference {
                area: self.area.clone(),
                request: id.to_owned(),
                path,
                kube,
                capstan,
            });
        }
        replies
    }

    /// Keeps the string at `pointer` of each server's reply as variable `name`.
    pub fn capture(&mut self, name: &str, replies: &[Reply; 2], pointer: &str) {
        for (peer, reply) in replies.iter().enumerate() {
            let value = reply
                .body
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_else(|| {
                    panic!(
                        "{} answered no string at {pointer}: {}",
                        PEERS[peer], reply.body
                    )
                });
            self.vars[peer].insert(name.to_owned(), value.to_owned());
        }
    }

    /// [`Self::capture`] of a value each server generated (a name from `generateName`): also
    /// replaced by `<name>` in each server's later answers.
    pub fn capture_generated(&mut self, name: &str, replies: &[Reply; 2], pointer: &str) {
        self.capture(name, replies, pointer);
        for peer in [KUBE, CAPSTAN] {
            let value = self.vars[peer][name].clone();
            self.generated[peer].push((value, format!("<{name}>")));
        }
    }

    /// Asks each server for `request` until `ready` holds of its reply (a CRD established, its
    /// resource served): setup, not compared.
    pub fn until_both(&self, what: &str, request: &Request, ready: impl Fn(&Reply) -> bool) {
        for peer in [KUBE, CAPSTAN] {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let reply = self.send_one(peer, request);
                if ready(&reply) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{what} on {}: not within 60 s; last reply {} {}",
                    PEERS[peer],
                    reply.code,
                    reply.body
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }

    /// Compares the differences found with `known` (see `known_differences.txt`), prints a count
    /// per area and every difference not listed and every listed one that no longer occurs, and
    /// returns whether both are empty. An entry's area or request may be `*` (a difference every
    /// request shows, such as the fields of list items). With `CAPSTAN_UPDATE_KNOWN_DIFFERENCES=1`
    /// the file is rewritten to the differences found (reasons kept; new ones "to classify").
    pub fn finish(&self, known: &Path) -> bool {
        let text = std::fs::read_to_string(known).unwrap_or_default();
        // (area, request, path) → reason, in file order.
        let mut listed: Vec<([String; 3], String)> = Vec::new();
        let mut header = String::new();
        for line in text.lines() {
            if line.trim().is_empty() || line.starts_with('#') {
                if listed.is_empty() {
                    header.push_str(line);
                    header.push('\n');
                }
                continue;
            }
            let fields: Vec<&str> = line.splitn(4, " | ").collect();
            assert_eq!(
                fields.len(),
                4,
                "{}: not `area | request | path | reason`: {line}",
                known.display()
            );
            listed.push((
                [fields[0], fields[1], fields[2]].map(str::to_owned),
                fields[3].to_owned(),
            ));
        }
        let matches = |entry: &[String; 3], d: &Difference| {
            (entry[0] == "*" || entry[0] == d.area)
                && (entry[1] == "*" || entry[1] == d.request)
                && entry[2] == d.path
        };

        let mut per_area: BTreeMap<&str, usize> = BTreeMap::new();
        let mut report = String::new();
        let mut unlisted = Vec::new();
        let mut used = vec![false; listed.len()];
        for d in &self.differences {
            *per_area.entry(d.area.as_str()).or_default() += 1;
            let mut found = false;
            for (i, (entry, _)) in listed.iter().enumerate() {
                if matches(entry, d) {
                    used[i] = true;
                    found = true;
                }
            }
            if !found {
                unlisted.push(d);
                let _ = writeln!(
                    report,
                    "NOT LISTED: {} | {} | {}\n    kube-apiserver: {}\n    capstan:        {}",
                    d.area,
                    d.request,
                    d.path,
                    show(&d.kube),
                    show(&d.capstan)
                );
            }
        }
        let mut stale = 0;
        for ((entry, _), used) in listed.iter().zip(&used) {
            if !used {
                stale += 1;
                let _ = writeln!(
                    report,
                    "STALE (no longer differs): {} | {} | {}",
                    entry[0], entry[1], entry[2]
                );
            }
        }
        let mut areas: BTreeSet<&str> = self.requests.iter().map(|(a, _)| a.as_str()).collect();
        areas.extend(per_area.keys());
        eprintln!("differences from kube-apiserver per area:");
        for area in areas {
            let requests = self.requests.iter().filter(|(a, _)| a == area).count();
            let differing: BTreeSet<&str> = self
                .differences
                .iter()
                .filter(|d| d.area == area)
                .map(|d| d.request.as_str())
                .collect();
            eprintln!(
                "  {area:<12} {:>3} differences; {:>2} of {requests:>2} requests differ",
                per_area.get(area).copied().unwrap_or(0),
                differing.len()
            );
        }
        eprintln!(
            "  total        {:>3} differences; {} entries listed",
            self.differences.len(),
            listed.len()
        );
        eprint!("{report}");

        if std::env::var_os("CAPSTAN_UPDATE_KNOWN_DIFFERENCES").is_some() {
            let mut out = header;
            for ((entry, reason), used) in listed.iter().zip(&used) {
                if *used {
                    let _ = writeln!(out, "{} | {} | {} | {reason}", entry[0], entry[1], entry[2]);
                }
            }
            for d in unlisted {
                let _ = writeln!(out, "{} | {} | {} | to classify", d.area, d.request, d.path);
            }
            std::fs::write(known, out).unwrap();
            eprintln!("rewrote {}", known.display());
            return true;
        }
        unlisted.is_empty() && stale == 0
    }
}

/// The checked-in list of known differences.
pub fn known_differences_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api_fidelity/known_differences.txt")
}

fn show(value: &Option<Value>) -> String {
    match value {
        None => "(absent)".to_owned(),
        Some(v) => {
            let text = v.to_string();
            if text.chars().count() > 300 {
                format!("{}…", text.chars().take(300).collect::<String>())
            } else {
                text
            }
        }
    }
}

fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}

fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Walks both values; a subtree present on one side only is one difference at its root.
fn diff(
    path: &str,
    kube: Option<&Value>,
    capstan: Option<&Value>,
    out: &mut Vec<(String, Option<Value>, Option<Value>)>,
) {
    match (kube, capstan) {
        // Different kinds (a Status where the reference answers with the object, or the
        // other way round): one difference, not one per field of either.
        (Some(Value::Object(a)), Some(Value::Object(b)))
            if a.get("kind").is_some_and(Value::is_string)
                && b.get("kind").is_some_and(Value::is_string)
                && a.get("kind") != b.get("kind") =>
        {
            out.push((
                if path.is_empty() { "/" } else { path }.to_owned(),
                kube.cloned(),
                capstan.cloned(),
            ));
        }
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                diff(
                    &format!("{path}/{}", escape(key)),
                    a.get(key),
                    b.get(key),
                    out,
                );
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            // Items are compared by position, but named `*`: one difference per field of a
            // list however many items show it.
            for i in 0..a.len().max(b.len()) {
                diff(&format!("{path}/*"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push((
            if path.is_empty() { "/" } else { path }.to_owned(),
            a.cloned(),
            b.cloned(),
        )),
    }
}

/// Replaces what legitimately differs between two servers with placeholders, keeping presence
/// (an absent uid on one side is still a difference).
pub fn normalise(value: &mut Value) {
    normalise_in(value, false);
    table_ages(value);
}

fn normalise_in(value: &mut Value, in_managed_fields: bool) {
    match value {
        Value::Object(map) => {
            generated_name(map);
            for (key, child) in map.iter_mut() {
                let placeholder = match key.as_str() {
                    "uid" => Some("<uid>"),
                    "resourceVersion" => Some("<resourceVersion>"),
                    "creationTimestamp" | "deletionTimestamp" | "lastTransitionTime" => {
                        Some("<time>")
                    }
                    "time" if in_managed_fields => Some("<time>"),
                    "continue" => Some("<continue>"),
                    // Discovery's serverAddressByClientCIDRs: each server's own port.
                    "serverAddress" => Some("<address>"),
                    _ => None,
                };
                match placeholder {
                    Some(p) if child.as_str().is_some_and(|s| !s.is_empty()) => {
                        *child = Value::String(p.to_owned());
                    }
                    _ => normalise_in(child, in_managed_fields || key == "managedFields"),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                normalise_in(item, in_managed_fields);
            }
        }
        _ => {}
    }
}

/// A name made from `generateName` ends in random characters: keep the prefix only.
fn generated_name(map: &mut Map<String, Value>) {
    let Some(prefix) = map.get("generateName").and_then(Value::as_str) else {
        return;
    };
    let prefix = prefix.to_owned();
    if let Some(Value::String(name)) = map.get_mut("name")
        && name.starts_with(&prefix)
    {
        *name = format!("{prefix}<generated>");
    }
}

/// A Table's `Age` cells are relative times.
fn table_ages(value: &mut Value) {
    if value["kind"] != "Table" {
        return;
    }
    let Some(age) = value["columnDefinitions"]
        .as_array()
        .and_then(|c| c.iter().position(|c| c["name"] == "Age"))
    else {
        return;
    };
    if let Some(rows) = value["rows"].as_array_mut() {
        for row in rows {
            if let Some(cell) = row["cells"].get_mut(age) {
                *cell = Value::String("<age>".to_owned());
            }
        }
    }
}
