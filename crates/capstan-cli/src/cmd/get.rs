//! `capstan get KIND [NAME]`: lists objects as the server's Table (the same columns `kubectl get`
//! shows), or as YAML, JSON or names; `-w` follows changes.

use crate::client::{self, get_json};
use crate::output::{Exit, Style};
use crate::output::{out, outln};
use crate::stderr::errln;
use anyhow::Context;
use futures::{AsyncBufReadExt, TryStreamExt};
use serde_json::Value;

/// Output forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Wide,
    Yaml,
    Json,
    Name,
}

/// Arguments of `capstan get`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kind, plural, singular or short name (`bmh`, `clusters`, `kcp`).
    kind: String,
    /// One object's name.
    name: Option<String>,
    /// Output form (default: a table).
    #[arg(short = 'o', long)]
    output: Option<Output>,
    /// Label selector (`key=value,other!=x`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// All namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Follow changes after listing.
    #[arg(short = 'w', long)]
    watch: bool,
    #[command(flatten)]
    connect: client::ConnectArgs,
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json";

fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => "<none>".into(),
        Value::String(s) if s.is_empty() => "<none>".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The header and the rows of a server Table as text cells: the default columns (all with
/// `-o wide`), after NAMESPACE with `-A`.
fn table_cells(table: &Value, wide: bool, all_namespaces: bool) -> (Vec<String>, Vec<Vec<String>>) {
    let columns: Vec<(usize, String)> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| wide || c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|(i, c)| {
            (
                i,
                c["name"].as_str().unwrap_or_default().to_ascii_uppercase(),
            )
        })
        .collect();
    let mut header: Vec<String> = columns.iter().map(|(_, n)| n.clone()).collect();
    if all_namespaces {
        header.insert(0, "NAMESPACE".into());
    }
    let mut rows = Vec::new();
    for row in table["rows"].as_array().into_iter().flatten() {
        let cells = row["cells"].as_array().cloned().unwrap_or_default();
        let mut line: Vec<String> = columns
            .iter()
            .map(|(i, _)| cells.get(*i).map_or_else(String::new, cell_text))
            .collect();
        if all_namespaces {
            line.insert(
                0,
                row["object"]["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        rows.push(line);
    }
    (header, rows)
}

/// Column widths that only grow, so the rows of a watch stay aligned under the header printed
/// first (a wider cell later widens its column from then on).
#[derive(Debug, Default)]
struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    fn fit(&mut self, row: &[String]) {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match self.widths.get_mut(i) {
                Some(width) => *width = (*width).max(w),
                None => self.widths.push(w),
            }
        }
    }

    fn line(&self, row: &[String]) -> String {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                let w = self.widths.get(i).copied().unwrap_or(0);
                format!("{cell:<w$}")
            })
            .collect();
        cells.join("   ").trim_end().to_owned()
    }
}

/// Prefixes a row with a watch event's type (`ADDED`, `MODIFIED`, `DELETED`).
fn with_event(event: &str, mut row: Vec<String>) -> Vec<String> {
    row.insert(0, event.to_owned());
    row
}

/// `value` (an object or a list) without `metadata.managedFields`, which kubectl hides too unless
/// asked: field ownership is bookkeeping for writers, not what a reader wants to see.
fn without_managed_fields(value: &Value) -> Value {
    let mut out = value.clone();
    let strip = |object: &mut Value| {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    };
    match out.get_mut("items").and_then(Value::as_array_mut) {
        Some(items) => items.iter_mut().for_each(strip),
        None => strip(&mut out),
    }
    out
}

/// Prints objects as YAML, JSON or `kind.group/name` (`resource`, as kubectl names them).
fn print_objects(value: &Value, output: Output, resource: &str) -> anyhow::Result<()> {
    let value = &without_managed_fields(value);
    let items: Vec<Value> = match value["items"].as_array() {
        Some(items) => items.clone(),
        None => vec![value.clone()],
    };
    match output {
        Output::Name => {
            for item in items {
                outln!(
                    "{resource}/{}",
                    item["metadata"]["name"].as_str().unwrap_or_default()
                );
            }
        }
        Output::Json => outln!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => out!("{}", capstan_manifest::to_yaml(value)),
        Output::Wide => {}
    }
    Ok(())
}

pub fn run(args: Args, _style: &Style) -> anyhow::Result<Exit> {
    args.connect.run(|client| async move {
        let resource = client::resolve(&client, &args.kind).await?;
        let namespace = (!args.all_namespaces).then_some(args.namespace.as_str());
        let mut path = resource.path(namespace, args.name.as_deref());
        let mut query = Vec::new();
        if let Some(sel) = &args.selector {
            query.push(format!("labelSelector={}", urlencode(sel)));
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let table_form = matches!(args.output, None | Some(Output::Wide));
        let wide = args.output == Some(Output::Wide);
        let shown = resource.kind_and_group();
        let value = get_json(&client, &path, table_form.then_some(TABLE)).await?;
        let mut columns = Columns::default();
        if table_form {
            let (mut header, mut rows) = table_cells(&value, wide, args.all_namespaces);
            if args.watch {
                // The initial list is what a watch from scratch would report as ADDED.
                header = with_event("EVENT", header);
                rows = rows.into_iter().map(|r| with_event("ADDED", r)).collect();
            }
            if rows.is_empty() && !args.watch {
                errln!("No resources found.");
            } else {
                if args.watch {
                    // The longest event type, so that later rows do not shift the columns.
                    columns.fit(&["MODIFIED".to_owned()]);
                }
                columns.fit(&header);
                rows.iter().for_each(|r| columns.fit(r));
                outln!("{}", columns.line(&header));
                for row in &rows {
                    outln!("{}", columns.line(row));
                }
            }
        } else if let Some(output) = args.output {
            print_objects(&value, output, &shown)?;
        }
        if !args.watch {
            return Ok(Exit::Ok);
        }
        let rv = value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_owned();
        let base = resource.path(namespace, None);
        let mut watch_query = vec![format!("watch=true"), format!("resourceVersion={rv}")];
        watch_query.extend(query);
        if let Some(name) = &args.name {
            watch_query.push(format!("fieldSelector=metadata.name%3D{}", urlencode(name)));
        }
        let mut request = http::Request::get(format!("{base}?{}", watch_query.join("&")));
        if table_form {
            request = request.header(http::header::ACCEPT, TABLE);
        }
        let request = request
            .body(Vec::new())
            .context("building the watch request")?;
        let stream = client
            .request_stream(request)
            .await
            .map_err(client::api_error)?;
        let mut lines = stream.lines();
        while let Some(line) = lines.try_next().await.context("reading the watch")? {
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match event["type"].as_str() {
                Some("BOOKMARK") => {}
                Some("ERROR") => anyhow::bail!(
                    "the watch ended: {}",
                    event["object"]["message"].as_str().unwrap_or("error")
                ),
                Some(kind) if table_form => {
                    let (_, rows) = table_cells(&event["object"], wide, args.all_namespaces);
                    for row in rows {
                        let row = with_event(kind, row);
                        columns.fit(&row);
                        outln!("{}", columns.line(&row));
                    }
                }
                _ => {
                    if let Some(output) = args.output {
                        print_objects(&event["object"], output, &shown)?;
                    }
                }
            }
        }
        Ok(Exit::Ok)
    })
}

/// Percent-encodes a query value.
pub fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn printed_objects_leave_field_ownership_out() {
        let entry = json!([{"manager": "kubectl", "operation": "Apply"}]);
        let object = json!({"metadata": {"name": "a", "managedFields": entry}});
        assert_eq!(
            without_managed_fields(&object),
            json!({"metadata": {"name": "a"}})
        );
        let list = json!({"items": [object.clone(), object]});
        assert_eq!(
            without_managed_fields(&list),
            json!({"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]})
        );
    }
}
