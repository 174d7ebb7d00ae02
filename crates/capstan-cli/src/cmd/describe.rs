//! `capstan describe KIND NAME`: what the object asks for (spec), what it reports (phase, state,
//! conditions with reasons and messages), and the recent Events about it — the "what is happening and
//! why" view.

use crate::client::{self, get_json};
use crate::output::{Exit, Style};
use serde_json::Value;

/// Arguments of `capstan describe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kind, plural, singular or short name.
    kind: String,
    /// Object name.
    name: String,
    /// Namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// `json` or `yaml` (only for `describe cluster NAME`, which otherwise prints its tree).
    #[arg(short = 'o', long)]
    output: Option<String>,
    #[command(flatten)]
    connect: client::ConnectArgs,
}

/// Secret values never reach the terminal.
fn redact(kind: &str, mut object: Value) -> Value {
    if kind == "Secret" {
        for key in ["data", "stringData"] {
            if let Some(map) = object[key].as_object_mut() {
                for v in map.values_mut() {
                    *v = Value::String("<redacted>".into());
                }
            }
        }
    }
    object
}

fn indent(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    if matches!(args.kind.as_str(), "cluster" | "clusters" | "cl") {
        return crate::cmd::describe_cluster::run(
            &args.name,
            &args.namespace,
            args.output.as_deref(),
            &args.connect,
            style,
        );
    }
    if args.output.is_some() {
        anyhow::bail!("-o is only for `describe cluster NAME`");
    }
    args.connect.run(|client| async move {
        let resource = client::resolve(&client, &args.kind).await?;
        let namespace = resource.namespaced.then_some(args.namespace.as_str());
        let object = redact(
            &resource.kind,
            get_json(&client, &resource.path(namespace, Some(&args.name)), None).await?,
        );
        let meta = &object["metadata"];
        println!("Name:         {}", args.name);
        if let Some(ns) = namespace {
            println!("Namespace:    {ns}");
        }
        println!(
            "Kind:         {} ({})",
            resource.kind,
            resource.api_version()
        );
        for (title, key) in [("Labels", "labels"), ("Annotations", "annotations")] {
            let pairs: Vec<String> = meta[key]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/last-applied"))
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            println!(
                "{:<13} {}",
                format!("{title}:"),
                if pairs.is_empty() {
                    "<none>".into()
                } else {
                    pairs.join(", ")
                }
            );
        }
        println!(
            "Created:      {}",
            meta["creationTimestamp"].as_str().unwrap_or("<unknown>")
        );
        if let Some(deleting) = meta["deletionTimestamp"].as_str() {
            println!(
                "Deleting:     since {deleting} (finalizers: {})",
                meta["finalizers"]
            );
        }
        let status = &object["status"];
        for (label, path) in [
            ("State", "/status/provisioning/state"),
            ("Phase", "/status/phase"),
            ("Operational", "/status/operationalStatus"),
            ("Error", "/status/errorMessage"),
        ] {
            if let Some(v) = object
                .pointer(path)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
            {
                let text = if label == "Error" {
                    style.error(v)
                } else {
                    v.to_owned()
                };
                println!("{:<13} {text}", format!("{label}:"));
            }
        }
        for key in ["spec", "data", "stringData"] {
            if object[key].is_object() {
                println!("{}:", capitalize(key));
                print!("{}", indent(&capstan_manifest::to_yaml(&object[key]), 2));
            }
        }
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        println!("Conditions:");
        if conditions.is_empty() {
            println!("  <none>");
        }
        for c in conditions {
            println!(
                "  {:<24} {:<8} {:<28} {}",
                c["type"].as_str().unwrap_or_default(),
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            );
        }
        let mut selector = format!(
            "involvedObject.name={},involvedObject.kind={}",
            args.name, resource.kind
        );
        if let Some(ns) = namespace {
            selector.push_str(&format!(",involvedObject.namespace={ns}"));
        }
        let events_path = format!(
            "/api/v1/{}events?fieldSelector={}",
            namespace
                .map(|ns| format!("namespaces/{ns}/"))
                .unwrap_or_default(),
            crate::cmd::get::urlencode(&selector)
        );
        let events = get_json(&client, &events_path, None).await?;
        let mut items = events["items"].as_array().cloned().unwrap_or_default();
        items.sort_by_key(|e| {
            e["lastTimestamp"]
                .as_str()
                .or(e["eventTime"].as_str())
                .unwrap_or_default()
                .to_owned()
        });
        println!("Events:");
        if items.is_empty() {
            println!("  <none>");
        }
        for e in items.iter().rev().take(20).rev() {
            let kind = e["type"].as_str().unwrap_or_default();
            let kind = if kind == "Warning" {
                style.warning(kind)
            } else {
                kind.to_owned()
            };
            println!(
                "  {:<8} {:<24} {:<21} {}",
                kind,
                e["reason"].as_str().unwrap_or_default(),
                e["lastTimestamp"]
                    .as_str()
                    .or(e["eventTime"].as_str())
                    .unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            );
        }
        Ok(Exit::Ok)
    })
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}
