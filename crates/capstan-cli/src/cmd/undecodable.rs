//! `capstan undecodable [--remove]`: the stored rows `capstan serve` cannot decode, and their removal.
//!
//! A row an older capstan committed without bounding nesting (or one altered outside capstan) is
//! skipped by lists and watches and answers 500 to a get. This lists such rows by key (never their
//! text: it may hold a Secret) and, with `--remove`, removes them through the running server, which
//! tells watchers that the keys are gone.

use crate::client::{ConnectArgs, api_error};
use crate::output::{Exit, Style, outln};
use crate::stderr::errln;
use anyhow::Context;
use serde_json::Value;

/// Arguments of `capstan undecodable`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Remove the rows listed (each is checked again by the server: only undecodable rows go).
    #[arg(long)]
    remove: bool,
}

const PATH: &str = "/capstan/v1/undecodable";

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let remove = args.remove;
    args.connect.run(|client| async move {
        let listed = crate::client::get_json(&client, PATH, None).await?;
        let keys: Vec<(String, String, String)> = listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let field = |name: &str| item[name].as_str().unwrap_or_default().to_owned();
                (field("resource"), field("namespace"), field("name"))
            })
            .collect();
        if keys.is_empty() {
            errln!("{}", style.ok("every stored object decodes"));
            return Ok(Exit::Ok);
        }
        for (resource, namespace, name) in &keys {
            let shown = if namespace.is_empty() {
                format!("{resource} {name}")
            } else {
                format!("{resource} {namespace}/{name}")
            };
            if !remove {
                outln!("{shown}");
                continue;
            }
            let query = [
                ("resource", resource.as_str()),
                ("namespace", namespace.as_str()),
                ("name", name.as_str()),
            ]
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect::<Vec<_>>()
            .join("&");
            let request = http::Request::delete(format!("{PATH}?{query}"))
                .body(Vec::new())
                .context("building the request")?;
            let answer = client.request_text(request).await.map_err(api_error)?;
            let status: Value = serde_json::from_str(&answer).unwrap_or_default();
            if status["status"] == "Success" {
                outln!("removed {shown}");
            } else {
                anyhow::bail!("removing {shown}: {}", status["message"]);
            }
        }
        if remove {
            Ok(Exit::Ok)
        } else {
            errln!(
                "{} stored row(s) cannot be decoded; `capstan undecodable --remove` removes them",
                keys.len()
            );
            Ok(Exit::Invalid)
        }
    })
}

/// Percent-encodes a query value (resource names hold `/` and `.`).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
