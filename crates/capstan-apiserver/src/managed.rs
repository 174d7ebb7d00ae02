//! Field ownership (`metadata.managedFields`) and server-side apply, as kube-apiserver keeps them.
//!
//! Every write records which manager set which fields: an `Update` entry per manager and API
//! version for creates, updates and patches (the fields the write added or changed), an `Apply`
//! entry per manager for server-side apply (exactly the fields of its last applied
//! configuration). A write takes the fields it changes from every other manager. An apply that
//! would change a field another manager owns fails with a conflict naming the fields and the
//! managers, unless forced (then it takes them). Fields a manager applied before and no longer
//! applies are removed from the object when no other manager owns them.
//!
//! As upstream: objects that have no `managedFields` are not tracked by updates (tracking starts
//! at creation or at the first apply, when the existing fields go to `before-first-apply`);
//! `apiVersion`, `kind` and the server-set metadata are never owned; a request's
//! `managedFields` replace the stored ones (an empty list clears them); writes through the main
//! resource never own `status` when the kind has a status subresource, and status writes own only
//! `status`.

use crate::fieldset::{FieldSet, Path, PathElement, path_text};
use crate::status::Cause;
use crate::structured::{self, Comparison, Shape};
use serde_json::{Map, Value, json};

/// The manager that receives the fields of an object first applied to without field tracking.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// At most this many `Update` entries are kept; older ones merge into [`ANCIENT_CHANGES`].
pub const MAX_UPDATE_ENTRIES: usize = 10;

/// The manager the oldest updates are merged into, per API version.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// The longest manager name accepted.
pub const MAX_MANAGER_LENGTH: usize = 128;

/// `Apply` or `Update`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `(manager, operation, apiVersion, subresource)` writes to:
    /// appliers keep one entry whatever version they apply in, updaters one per version.
    fn is(&self, id: &Identity) -> bool {
        self.manager == id.manager
            && self.operation == id.operation
            && self.subresource == id.subresource
            && (self.operation == Operation::Apply || self.api_version == id.api_version)
    }

    /// The manager as conflict messages name it.
    fn describe(&self) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            text.push_str(&format!(" using {}", self.api_version));
        }
        text
    }

    fn to_json(&self) -> Value {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(self.manager));
        entry.insert("operation".into(), json!(self.operation.name()));
        entry.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            entry.insert("time".into(), json!(time));
        }
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            entry.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(entry)
    }

    fn from_json(value: &Value) -> Option<Entry> {
        let operation = match value["operation"].as_str()? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        if value["fieldsType"]
            .as_str()
            .is_some_and(|t| t != "FieldsV1")
        {
            return None;
        }
        let fields = match value.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(doc) => FieldSet::from_fields_v1(doc).ok()?,
        };
        Some(Entry {
            manager: value["manager"].as_str().unwrap_or_default().to_owned(),
            operation,
            api_version: value["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: value["time"].as_str().map(str::to_owned),
            subresource: value["subresource"].as_str().unwrap_or_default().to_owned(),
            fields,
        })
    }
}

/// Which entry a write goes to.
#[derive(Clone, Debug)]
struct Identity {
    manager: String,
    operation: Operation,
    api_version: String,
    subresource: String,
}

/// The entries of `metadata.managedFields`; `None` when there is no such list or it cannot be
/// read (the stored entries are then kept, as upstream does).
pub fn decode(object: &Value) -> Option<Vec<Entry>> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .map(Entry::from_json)
        .collect()
}

/// Whether a request's `managedFields` ask for them to be cleared: an empty list, or one empty
/// entry.
pub fn is_reset(object: &Value) -> bool {
    match object["metadata"]["managedFields"].as_array() {
        Some(list) if list.is_empty() => true,
        Some(list) if list.len() == 1 => list[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// The `managedFields` list, in upstream's order (appliers first, then by time, manager, version).
pub fn encode(entries: &[Entry]) -> Value {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    Value::Array(sorted.into_iter().map(Entry::to_json).collect())
}

/// Removes `metadata.managedFields`, for comparisons.
pub fn without_managed_fields(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    out
}

/// Sets (or, when there are no entries, removes) `metadata.managedFields`.
pub fn set_managed_fields(object: &mut Value, entries: &[Entry]) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), encode(entries));
        }
    }
}

/// The part of an object a request can change, for field ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Everything.
    All,
    /// Everything but `status` (the main resource of a kind with a status subresource).
    NotStatus,
    /// Only `status` (the status subresource).
    OnlyStatus,
}

impl Reach {
    /// Whether the request can change the top-level field `key`.
    fn keeps(self, key: &str) -> bool {
        match self {
            Self::All => true,
            Self::NotStatus => key != "status",
            Self::OnlyStatus => key == "status",
        }
    }

    fn filter(self, set: &FieldSet) -> FieldSet {
        let status = PathElement::Field("status".into());
        match self {
            Self::All => set.clone(),
            Self::NotStatus => set.filter_top(|pe| *pe != status),
            Self::OnlyStatus => set.filter_top(|pe| *pe == status),
        }
    }
}

/// The fields nobody owns: the type, and metadata the server sets.
fn stripped(set: &FieldSet) -> FieldSet {
    let mut strip = FieldSet::new();
    for top in ["apiVersion", "kind", "metadata"] {
        strip.insert(&[PathElement::Field(top.into())]);
    }
    for meta in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        strip.insert(&[
            PathElement::Field("metadata".into()),
            PathElement::Field(meta.into()),
        ]);
    }
    set.difference(&strip)
}

/// What a kind looks like in each of its versions, and how objects convert between them.
pub trait Versions {
    /// The shape of objects in `api_version` (`group/version`), if that version is served.
    fn shape(&self, api_version: &str) -> Option<Shape<'_>>;
    /// `object` (in the request's version) converted to `api_version`.
    fn convert(&self, object: &Value, api_version: &str) -> Option<Value>;
}

/// The request a write is for.
pub struct Context<'a> {
    /// The request's `group/version`: objects handed in are in it, new entries record it.
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub reach: Reach,
    pub versions: &'a dyn Versions,
    /// The time recorded on entries the write changes.
    pub now: String,
}

impl Context<'_> {
    fn shape(&self) -> Shape<'_> {
        self.versions
            .shape(self.api_version)
            .unwrap_or_else(|| Shape::root(None, false))
    }

    fn identity(&self, manager: &str, operation: Operation) -> Identity {
        Identity {
            manager: manager.to_owned(),
            operation,
            api_version: self.api_version.to_owned(),
            subresource: self.subresource.to_owned(),
        }
    }
}

/// Fields an apply would take from other managers: (manager as messages name it, field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(Vec<(String, Path)>);

impl Conflicts {
    /// The conflicts on fields outside `allowed`.
    fn outside(&self, allowed: &FieldSet) -> Conflicts {
        Conflicts(
            self.0
                .iter()
                .filter(|(_, path)| !allowed.has(path))
                .cloned()
                .collect(),
        )
    }

    /// The message kube-apiserver gives (kubectl prints it and adds its advice).
    pub fn message(&self) -> String {
        let list: Vec<(&String, String)> = self.0.iter().map(|(m, p)| (m, path_text(p))).collect();
        if let [(manager, path)] = list.as_slice() {
            return format!("Apply failed with 1 conflict: conflict with {manager}: {path}");
        }
        let mut lines = Vec::new();
        let mut managers: Vec<&String> = list.iter().map(|(m, _)| *m).collect();
        managers.dedup();
        for manager in managers {
            lines.push(format!("conflicts with {manager}:"));
            for (_, path) in list.iter().filter(|(m, _)| *m == manager) {
                lines.push(format!("- {path}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            list.len(),
            lines.join("\n")
        )
    }

    /// One `FieldManagerConflict` cause per field.
    pub fn causes(&self) -> Vec<Cause> {
        self.0
            .iter()
            .map(|(manager, path)| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {manager}"),
                field: path_text(path),
            })
            .collect()
    }
}

/// Takes the fields `old` → `new` changes from every manager but `writer`; fails on a conflict
/// unless `force`. Returns the comparison in the request's version.
fn take_changed_fields(
    ctx: &Context<'_>,
    old: &Value,
    new: &Value,
    entries: &mut Vec<Entry>,
    writer: Option<&Identity>,
    force: bool,
) -> Result<Comparison, Conflicts> {
    let keeps = |key: &str| ctx.reach.keeps(key);
    let here = structured::compare_where(old, new, &ctx.shape(), keeps);
    let mut conflicts = Vec::new();
    let mut taken: Vec<(usize, FieldSet)> = Vec::new();
    let mut gone = Vec::new();
    let mut converted_comparison;
    for (index, entry) in entries.iter().enumerate() {
        if writer.is_some_and(|w| entry.is(w)) {
            continue;
        }
        let compared = if entry.api_version == ctx.api_version {
            &here
        } else {
            let converted = ctx.versions.shape(&entry.api_version).and_then(|shape| {
                let old = ctx.versions.convert(old, &entry.api_version)?;
                let new = ctx.versions.convert(new, &entry.api_version)?;
                Some(structured::compare_where(&old, &new, &shape, keeps))
            });
            match converted {
                Some(c) => {
                    converted_comparison = c;
                    &converted_comparison
                }
                // A version no longer served: its entries go, as upstream.
                None => {
                    gone.push(index);
                    continue;
                }
            }
        };
        let changed = compared.modified.union(&compared.added);
        let conflict = entry.fields.intersection(&changed);
        if !conflict.is_empty() {
            for path in conflict.paths() {
                conflicts.push((entry.describe(), path));
            }
        }
        taken.push((index, conflict.union(&compared.removed)));
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort();
        return Err(Conflicts(conflicts));
    }
    for (index, fields) in taken {
        if let Some(entry) = entries.get_mut(index) {
            entry.fields = entry.fields.difference(&fields);
        }
    }
    let mut index = 0;
    entries.retain(|e| {
        let keep = !gone.contains(&index) && !e.fields.is_empty();
        index += 1;
        keep
    });
    Ok(here)
}

/// Records a create, update or patch by `manager`: `live` is the stored object (`None` for a
/// create), `new` what will be stored, `entries` the ownership to start from.
pub fn update(
    ctx: &Context<'_>,
    live: Option<&Value>,
    new: &Value,
    entries: Vec<Entry>,
    manager: &str,
) -> Vec<Entry> {
    // Objects without managedFields are not tracked until created or applied to.
    if entries.is_empty() && live.is_some() {
        return entries;
    }
    record_update(ctx, live, new, entries, manager)
}

fn record_update(
    ctx: &Context<'_>,
    live: Option<&Value>,
    new: &Value,
    mut entries: Vec<Entry>,
    manager: &str,
) -> Vec<Entry> {
    let empty = json!({});
    // The comparison never looks at managedFields, so the objects are compared as they are.
    let old = live.unwrap_or(&empty);
    let Ok(compared) = take_changed_fields(ctx, old, new, &mut entries, None, true) else {
        return entries;
    };
    let fields = stripped(&compared.modified.union(&compared.added));
    if fields.is_empty() {
        return entries;
    }
    let id = ctx.identity(manager, Operation::Update);
    match entries.iter_mut().find(|e| e.is(&id)) {
        Some(entry) => {
            entry.fields = entry.fields.union(&fields);
            entry.time = Some(ctx.now.clone());
        }
        None => entries.push(Entry {
            manager: id.manager,
            operation: Operation::Update,
            api_version: id.api_version,
            time: Some(ctx.now.clone()),
            subresource: id.subresource,
            fields,
        }),
    }
    cap_update_entries(&mut entries);
    entries
}

/// Keeps at most [`MAX_UPDATE_ENTRIES`] `Update` entries: the oldest are merged, per API
/// version, into an [`ANCIENT_CHANGES`] entry (which takes the time of the newest merged one).
fn cap_update_entries(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == Operation::Update)
        .collect();
    if updaters.len() <= MAX_UPDATE_ENTRIES {
        return;
    }
    updaters.sort_by(|&a, &b| {
        (&entries[a].time, &entries[a].manager).cmp(&(&entries[b].time, &entries[b].manager))
    });
    let mut count = updaters.len();
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut removed = vec![false; entries.len()];
    for &index in &updaters {
        if count <= MAX_UPDATE_ENTRIES {
            break;
        }
        let version = entries[index].api_version.clone();
        match first_of_version.iter().find(|(v, _)| *v == version) {
            Some(&(_, bucket)) => {
                let merged = entries[index].fields.clone();
                let time = entries[index].time.clone();
                let target = &mut entries[bucket];
                target.manager = ANCIENT_CHANGES.to_owned();
                target.subresource = String::new();
                target.fields = target.fields.union(&merged);
                target.time = time;
                removed[index] = true;
                count -= 1;
            }
            None => first_of_version.push((version, index)),
        }
    }
    let mut index = 0;
    entries.retain(|_| {
        let keep = !removed[index];
        index += 1;
        keep
    });
}

/// The result of an apply.
#[derive(Debug)]
pub struct Applied {
    /// The object to store (before defaulting and validation).
    pub object: Value,
    pub entries: Vec<Entry>,
}

/// The annotation client-side `kubectl apply` keeps its configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager `kubectl apply --server-side` uses by default.
const KUBECTL: &str = "kubectl";

/// Server-side apply of `config` by `manager` to `live` (`None`: the object does not exist yet).
///
/// For `kubectl`'s own manager, as upstream, an object managed by client-side apply moves over
/// without conflicts: fields its `last-applied-configuration` still describes may be taken, and
/// that annotation is kept in step with what is applied.
pub fn apply(
    ctx: &Context<'_>,
    live: Option<&Value>,
    config: &Value,
    entries: Vec<Entry>,
    manager: &str,
    force: bool,
) -> Result<Applied, Conflicts> {
    let mut applied = match apply_fields(ctx, live, config, entries.clone(), manager, force) {
        Err(conflicts) if manager == KUBECTL => {
            let Some(allowed) = live.and_then(|l| described_by_last_applied(ctx, l)) else {
                return Err(conflicts);
            };
            let remaining = conflicts.outside(&allowed);
            if !remaining.0.is_empty() {
                return Err(remaining);
            }
            apply_fields(ctx, live, config, entries, manager, true)?
        }
        other => other?,
    };
    if manager == KUBECTL
        && let Some(annotations) = applied
            .object
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        && annotations
            .get(LAST_APPLIED)
            .is_some_and(|v| v.as_str().is_some_and(|t| !t.is_empty()))
    {
        let mut last = config.clone();
        let emptied = last
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            .is_some_and(|a| {
                a.remove(LAST_APPLIED);
                a.is_empty()
            });
        if emptied && let Some(meta) = last.pointer_mut("/metadata").and_then(Value::as_object_mut)
        {
            meta.remove("annotations");
        }
        annotations.insert(LAST_APPLIED.into(), Value::String(last.to_string()));
    }
    Ok(applied)
}

/// The fields a `last-applied-configuration` sets that still hold its values in `live`.
fn described_by_last_applied(ctx: &Context<'_>, live: &Value) -> Option<FieldSet> {
    let text = live["metadata"]["annotations"][LAST_APPLIED].as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    if last["apiVersion"].as_str() != Some(ctx.api_version) {
        return None;
    }
    let shape = ctx.shape();
    let differs = structured::compare(&last, &without_managed_fields(live), &shape);
    Some(
        structured::field_set(&last, &shape)
            .difference(&differs.modified)
            .difference(&differs.added)
            .difference(&differs.removed),
    )
}

fn apply_fields(
    ctx: &Context<'_>,
    live: Option<&Value>,
    config: &Value,
    mut entries: Vec<Entry>,
    manager: &str,
    force: bool,
) -> Result<Applied, Conflicts> {
    let empty = json!({});
    let live = without_managed_fields(live.unwrap_or(&empty));
    if entries.is_empty() && live != empty {
        entries = record_update(ctx, None, &live, entries, BEFORE_FIRST_APPLY);
    }
    let shape = ctx.shape();
    let merged = structured::merge(&live, config, &shape);
    let id = ctx.identity(manager, Operation::Apply);
    let last = entries
        .iter()
        .find(|e| e.is(&id))
        .filter(|e| e.api_version == ctx.api_version)
        .map(|e| e.fields.clone());
    let fields = ctx.reach.filter(&structured::field_set(config, &shape));
    let previous_time = entries
        .iter()
        .find(|e| e.is(&id))
        .and_then(|e| e.time.clone());
    entries.retain(|e| !e.is(&id));
    entries.push(Entry {
        manager: id.manager.clone(),
        operation: Operation::Apply,
        api_version: ctx.api_version.to_owned(),
        time: previous_time,
        subresource: id.subresource.clone(),
        fields,
    });
    let object = match last {
        Some(last) if !last.is_empty() => prune(&merged, &entries, &last, ctx, &shape),
        _ => merged,
    };
    take_changed_fields(ctx, &live, &object, &mut entries, Some(&id), force)?;
    let changed = object != live;
    for entry in entries.iter_mut().filter(|e| e.is(&id)) {
        entry.fields = stripped(&entry.fields);
        if changed {
            entry.time = Some(ctx.now.clone());
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    cap_update_entries(&mut entries);
    Ok(Applied { object, entries })
}

/// Removes from `merged` what the applier owned in `last` and no longer applies, unless another
/// manager owns it; fields nobody owned are left alone.
fn prune(
    merged: &Value,
    entries: &[Entry],
    last: &FieldSet,
    ctx: &Context<'_>,
    shape: &Shape<'_>,
) -> Value {
    let named = |set: &FieldSet| structured::with_named_fields(set, shape);
    let last = named(last);
    let owned = entries
        .iter()
        .filter(|e| e.api_version == ctx.api_version)
        .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
    let merged_fields = named(&structured::field_set(merged, shape));
    let pruned = structured::remove_fields(merged, &last, shape);
    let pruned_fields = named(&structured::field_set(&pruned, shape));
    // Put back what anyone still owns.
    let kept = structured::remove_fields(
        merged,
        &merged_fields.difference(&pruned_fields.union(&named(&owned))),
        shape,
    );
    let kept_fields = named(&structured::field_set(&kept, shape));
    // Only what the applier owned goes.
    structured::remove_fields(
        merged,
        &merged_fields.difference(&kept_fields).intersection(&last),
        shape,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use capstan_schema::Schema;
    use std::sync::OnceLock;

    /// One version, `v1`, with the schema of a Deployment (typed) or none (open).
    struct One {
        schema: Option<&'static Schema>,
        builtin: bool,
    }

    impl Versions for One {
        fn shape(&self, api_version: &str) -> Option<Shape<'_>> {
            (api_version == "v1").then(|| Shape::root(self.schema, self.builtin))
        }
        fn convert(&self, object: &Value, api_version: &str) -> Option<Value> {
            (api_version == "v1").then(|| object.clone())
        }
    }

    fn deployment() -> One {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| {
            Schema::from_value(&crate::builtin::schemas::schema("apps", "Deployment").unwrap())
                .unwrap()
        });
        One {
            schema: Some(schema),
            builtin: true,
        }
    }

    fn ctx(versions: &One) -> Context<'_> {
        Context {
            api_version: "v1",
            subresource: "",
            reach: Reach::NotStatus,
            versions,
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// Applies in sequence, as a client would, returning the object and its entries.
    struct Object {
        value: Option<Value>,
        entries: Vec<Entry>,
    }

    impl Object {
        fn new() -> Self {
            Self {
                value: None,
                entries: Vec::new(),
            }
        }

        fn apply(
            &mut self,
            v: &One,
            manager: &str,
            config: Value,
            force: bool,
        ) -> Result<(), Conflicts> {
            let applied = apply(
                &ctx(v),
                self.value.as_ref(),
                &config,
                self.entries.clone(),
                manager,
                force,
            )?;
            self.value = Some(applied.object);
            self.entries = applied.entries;
            Ok(())
        }

        fn update(&mut self, v: &One, manager: &str, new: Value) {
            self.entries = update(
                &ctx(v),
                self.value.as_ref(),
                &new,
                self.entries.clone(),
                manager,
            );
            self.value = Some(new);
        }

        fn owner(&self, manager: &str) -> Value {
            self.entries
                .iter()
                .find(|e| e.manager == manager)
                .map_or(Value::Null, |e| e.fields.to_fields_v1())
        }
    }

    fn dep(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec})
    }

    #[test]
    fn an_applier_owns_exactly_what_it_applied() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(&v, "a", dep(json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}})), false)
            .unwrap();
        assert_eq!(
            o.owner("a"),
            json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        assert_eq!(o.entries[0].operation, Operation::Apply);
        assert_eq!(o.entries[0].time.as_deref(), Some("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn changing_another_appliers_field_conflicts_unless_forced() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(&v, "a", dep(json!({"replicas": 2})), false)
            .unwrap();
        // The same value is shared ownership, not a conflict.
        o.apply(&v, "b", dep(json!({"replicas": 2})), false)
            .unwrap();
        assert_eq!(o.owner("b"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(o.owner("a"), json!({"f:spec": {"f:replicas": {}}}));
        let err = o
            .apply(&v, "c", dep(json!({"replicas": 3, "paused": true})), false)
            .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\nconflicts with \"b\":\n- .spec.replicas"
        );
        assert_eq!(o.value.as_ref().unwrap()["spec"]["replicas"], 2);
        o.apply(&v, "c", dep(json!({"replicas": 3})), true).unwrap();
        assert_eq!(o.value.as_ref().unwrap()["spec"]["replicas"], 3);
        // Forcing took the field from both.
        assert_eq!(o.owner("a"), Value::Null);
        assert_eq!(o.owner("b"), Value::Null);
        assert_eq!(o.owner("c"), json!({"f:spec": {"f:replicas": {}}}));
    }

    #[test]
    fn fields_an_applier_drops_are_removed_unless_someone_else_owns_them() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(
            &v,
            "a",
            dep(json!({"replicas": 2, "paused": true, "minReadySeconds": 5})),
            false,
        )
        .unwrap();
        o.apply(&v, "b", dep(json!({"minReadySeconds": 5})), false)
            .unwrap();
        o.apply(&v, "a", dep(json!({"replicas": 2})), false)
            .unwrap();
        let spec = &o.value.as_ref().unwrap()["spec"];
        assert_eq!(spec["replicas"], 2);
        assert!(spec.get("paused").is_none(), "{spec}");
        assert_eq!(spec["minReadySeconds"], 5, "b still owns it");
        assert_eq!(o.owner("a"), json!({"f:spec": {"f:replicas": {}}}));
    }

    #[test]
    fn list_items_an_applier_drops_are_removed() {
        let v = deployment();
        let mut o = Object::new();
        let containers = |names: &[&str]| {
            dep(
                json!({"template": {"spec": {"containers": names.iter().map(|n| json!({"name": n, "image": "i"})).collect::<Vec<_>>()}}}),
            )
        };
        o.apply(&v, "a", containers(&["x", "y"]), false).unwrap();
        o.apply(&v, "a", containers(&["y"]), false).unwrap();
        let list = &o.value.as_ref().unwrap()["spec"]["template"]["spec"]["containers"];
        assert_eq!(list, &json!([{"name": "y", "image": "i"}]));
    }

    #[test]
    fn updates_record_their_changes_and_take_them_from_appliers() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(&v, "a", dep(json!({"replicas": 2, "paused": false})), false)
            .unwrap();
        let mut edited = o.value.clone().unwrap();
        edited["spec"]["replicas"] = json!(5);
        edited["metadata"]["labels"] = json!({"x": "y"});
        o.update(&v, "kubectl-edit", edited);
        assert_eq!(
            o.owner("kubectl-edit"),
            json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}, "f:spec": {"f:replicas": {}}})
        );
        assert_eq!(o.owner("a"), json!({"f:spec": {"f:paused": {}}}));
        // Applying the old value again now conflicts with the updater, named with its version.
        let err = o
            .apply(&v, "a", dep(json!({"replicas": 2, "paused": false})), false)
            .unwrap_err();
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .spec.replicas"
        );
        assert_eq!(err.causes()[0].field, ".spec.replicas");
    }

    #[test]
    fn untracked_objects_start_tracking_at_the_first_apply() {
        let v = deployment();
        let mut o = Object::new();
        o.value = Some(dep(json!({"replicas": 1, "paused": true})));
        o.update(&v, "someone", dep(json!({"replicas": 4, "paused": true})));
        assert!(
            o.entries.is_empty(),
            "updates of untracked objects are not tracked"
        );
        let err = o
            .apply(&v, "a", dep(json!({"replicas": 2})), false)
            .unwrap_err();
        assert!(
            err.message()
                .contains("\"before-first-apply\" using v1: .spec.replicas"),
            "{}",
            err.message()
        );
        o.apply(&v, "a", dep(json!({"replicas": 2})), true).unwrap();
        assert_eq!(
            o.owner(BEFORE_FIRST_APPLY),
            json!({"f:spec": {"f:paused": {}}})
        );
    }

    #[test]
    fn kubectl_moves_from_client_side_apply_without_conflicts() {
        let v = deployment();
        let mut o = Object::new();
        let mut last = dep(json!({"replicas": 2}));
        // The annotation must be of the version applied (the test kind's version is `v1`).
        last["apiVersion"] = json!("v1");
        let mut created = dep(json!({"replicas": 2}));
        created["metadata"]["annotations"] = json!({LAST_APPLIED: last.to_string()});
        o.update(&v, "kubectl-client-side-apply", created.clone());
        o.entries = update(
            &ctx(&v),
            None,
            &created,
            Vec::new(),
            "kubectl-client-side-apply",
        );
        // Another manager is still refused; kubectl takes the field over.
        assert!(
            o.apply(&v, "other", dep(json!({"replicas": 3})), false)
                .is_err()
        );
        o.apply(&v, "kubectl", dep(json!({"replicas": 3})), false)
            .unwrap();
        let object = o.value.clone().unwrap();
        assert_eq!(object["spec"]["replicas"], 3);
        let synced: Value = serde_json::from_str(
            object["metadata"]["annotations"][LAST_APPLIED]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(synced["spec"]["replicas"], 3);
    }

    #[test]
    fn the_oldest_of_many_updaters_merge_into_ancient_changes() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(&v, "a", dep(json!({"replicas": 1})), false)
            .unwrap();
        for i in 0..12 {
            let mut next = o.value.clone().unwrap();
            next["metadata"]["labels"][format!("l{i}")] = json!("x");
            let mut c = ctx(&v);
            c.now = format!("2026-01-01T00:00:{i:02}Z");
            o.entries = update(
                &c,
                o.value.as_ref(),
                &next,
                o.entries.clone(),
                &format!("m{i:02}"),
            );
            o.value = Some(next);
        }
        let updaters = o
            .entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .count();
        assert_eq!(updaters, MAX_UPDATE_ENTRIES);
        let ancient = o
            .entries
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .unwrap();
        assert!(
            o.entries
                .iter()
                .all(|e| e.manager != "m00" && e.manager != "m01")
        );
        assert!(ancient.time.is_some());
        assert!(o.owner("a").is_object(), "appliers are never merged");
    }

    #[test]
    fn status_is_out_of_reach_of_the_main_resource() {
        let v = deployment();
        let mut o = Object::new();
        o.apply(&v, "a", dep(json!({"replicas": 1})), false)
            .unwrap();
        let mut with_status = o.value.clone().unwrap();
        with_status["status"] = json!({"replicas": 1});
        o.update(&v, "b", with_status);
        assert_eq!(o.owner("b"), Value::Null);
    }

    #[test]
    fn open_objects_and_managed_fields_round_trip() {
        let v = One {
            schema: None,
            builtin: false,
        };
        let mut o = Object::new();
        o.update(&v, "kubectl-create", json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x", "uid": "u"}, "spec": {"a": 1}}));
        assert_eq!(
            o.owner("kubectl-create"),
            json!({"f:spec": {".": {}, "f:a": {}}})
        );
        let mut stored = o.value.clone().unwrap();
        set_managed_fields(&mut stored, &o.entries);
        assert_eq!(
            stored["metadata"]["managedFields"][0]["operation"],
            "Update"
        );
        assert_eq!(
            stored["metadata"]["managedFields"][0]["fieldsType"],
            "FieldsV1"
        );
        assert_eq!(decode(&stored).unwrap(), o.entries);
        assert!(is_reset(&json!({"metadata": {"managedFields": []}})));
        assert!(is_reset(&json!({"metadata": {"managedFields": [{}]}})));
        assert!(!is_reset(&json!({"metadata": {}})));
    }

    /// A custom kind whose schema marks structs and lists atomic or granular, as CRDs do.
    fn marked_kind() -> One {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| {
            let reference = json!({"type": "object", "x-kubernetes-map-type": "atomic",
                "properties": {"kind": {"type": "string"}, "name": {"type": "string"}, "namespace": {"type": "string"}}});
            Schema::from_value(&json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {
                    "ref": reference,
                    "granularRef": {"type": "object", "x-kubernetes-map-type": "granular",
                        "properties": {"kind": {"type": "string"}, "name": {"type": "string"}}},
                    "labels": {"type": "object", "x-kubernetes-map-type": "atomic",
                        "additionalProperties": {"type": "string"}},
                    "args": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "targets": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {
                            "name": {"type": "string"}, "ref": reference}}},
                }},
            }}))
            .unwrap()
        });
        One {
            schema: Some(schema),
            builtin: false,
        }
    }

    fn custom(spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
    }

    /// One step of a case: an apply (optionally forced) or an update by a manager.
    enum Step {
        Apply(&'static str, Value),
        Force(&'static str, Value),
        Update(&'static str, Value),
    }

    /// What a case expects: the conflict message of its last step (none: it succeeds), the
    /// object's `spec` after every step, and managers' field sets.
    struct Case {
        name: &'static str,
        versions: fn() -> One,
        wrap: fn(Value) -> Value,
        steps: Vec<Step>,
        conflict: Option<&'static str>,
        spec: Value,
        owners: Vec<(&'static str, Value)>,
    }

    fn run(case: Case) {
        let v = (case.versions)();
        let mut o = Object::new();
        let last = case.steps.len() - 1;
        for (i, step) in case.steps.into_iter().enumerate() {
            let result = match step {
                Step::Apply(m, spec) => o.apply(&v, m, (case.wrap)(spec), false),
                Step::Force(m, spec) => o.apply(&v, m, (case.wrap)(spec), true),
                Step::Update(m, spec) => {
                    let mut new = o.value.clone().unwrap_or_else(|| (case.wrap)(json!({})));
                    new["spec"] = spec;
                    o.update(&v, m, new);
                    Ok(())
                }
            };
            match (result, i == last, case.conflict) {
                (Err(c), true, Some(want)) => assert_eq!(c.message(), want, "{}", case.name),
                (Err(c), _, _) => panic!("{}: step {i}: {}", case.name, c.message()),
                (Ok(()), true, Some(want)) => panic!("{}: expected conflict {want}", case.name),
                (Ok(()), _, _) => {}
            }
        }
        assert_eq!(
            o.value.as_ref().unwrap()["spec"],
            case.spec,
            "{}",
            case.name
        );
        for (manager, fields) in case.owners {
            assert_eq!(o.owner(manager), fields, "{}: {manager}", case.name);
        }
    }

    /// Atomic structs, maps and lists as structured-merge-diff specifies them: owned as one
    /// field, replaced as a whole by an apply, conflicting as a whole; granular ones field by
    /// field. Built-in kinds take the markers Kubernetes' types carry (`LabelSelector`,
    /// `nodeSelector`, `secretKeyRef` …), custom kinds those of their schema.
    #[test]
    fn atomic_and_granular_values_follow_structured_merge_diff() {
        let cases = vec![
            Case {
                name: "an atomic struct is owned as one field",
                versions: marked_kind,
                wrap: custom,
                steps: vec![Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}}))],
                conflict: None,
                spec: json!({"ref": {"kind": "K", "name": "n"}}),
                owners: vec![("a", json!({"f:spec": {"f:ref": {}}}))],
            },
            Case {
                name: "a granular struct is owned field by field",
                versions: marked_kind,
                wrap: custom,
                steps: vec![Step::Apply(
                    "a",
                    json!({"granularRef": {"kind": "K", "name": "n"}}),
                )],
                conflict: None,
                spec: json!({"granularRef": {"kind": "K", "name": "n"}}),
                owners: vec![(
                    "a",
                    json!({"f:spec": {"f:granularRef": {"f:kind": {}, "f:name": {}}}}),
                )],
            },
            Case {
                name: "a smaller atomic struct replaces the live one",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply(
                        "a",
                        json!({"ref": {"kind": "K", "name": "n", "namespace": "x"}}),
                    ),
                    Step::Apply("a", json!({"ref": {"name": "m"}})),
                ],
                conflict: None,
                spec: json!({"ref": {"name": "m"}}),
                owners: vec![("a", json!({"f:spec": {"f:ref": {}}}))],
            },
            Case {
                name: "a field another manager set inside an atomic struct goes with the next apply's value",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}})),
                    Step::Force(
                        "b",
                        json!({"ref": {"kind": "K", "name": "n", "namespace": "x"}}),
                    ),
                    Step::Force("a", json!({"ref": {"kind": "K", "name": "n"}})),
                ],
                conflict: None,
                spec: json!({"ref": {"kind": "K", "name": "n"}}),
                owners: vec![("a", json!({"f:spec": {"f:ref": {}}})), ("b", Value::Null)],
            },
            Case {
                name: "changing one leaf of another applier's atomic struct conflicts on the struct",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}})),
                    Step::Apply("b", json!({"ref": {"kind": "K", "name": "other"}})),
                ],
                conflict: Some("Apply failed with 1 conflict: conflict with \"a\": .spec.ref"),
                spec: json!({"ref": {"kind": "K", "name": "n"}}),
                owners: vec![("a", json!({"f:spec": {"f:ref": {}}}))],
            },
            Case {
                name: "adding a leaf to another applier's atomic struct conflicts (granular would not)",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"ref": {"name": "n"}})),
                    Step::Apply("b", json!({"ref": {"name": "n", "namespace": "x"}})),
                ],
                conflict: Some("Apply failed with 1 conflict: conflict with \"a\": .spec.ref"),
                spec: json!({"ref": {"name": "n"}}),
                owners: vec![],
            },
            Case {
                name: "adding a leaf to another applier's granular struct does not conflict",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"granularRef": {"name": "n"}})),
                    Step::Apply("b", json!({"granularRef": {"name": "n", "kind": "K"}})),
                ],
                conflict: None,
                spec: json!({"granularRef": {"name": "n", "kind": "K"}}),
                owners: vec![
                    ("a", json!({"f:spec": {"f:granularRef": {"f:name": {}}}})),
                    (
                        "b",
                        json!({"f:spec": {"f:granularRef": {"f:kind": {}, "f:name": {}}}}),
                    ),
                ],
            },
            Case {
                name: "the same atomic value is shared ownership",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}})),
                    Step::Apply("b", json!({"ref": {"kind": "K", "name": "n"}})),
                    Step::Apply("a", json!({})),
                ],
                conflict: None,
                spec: json!({"ref": {"kind": "K", "name": "n"}}),
                owners: vec![("b", json!({"f:spec": {"f:ref": {}}}))],
            },
            Case {
                name: "an atomic struct its only applier drops is removed",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply(
                        "a",
                        json!({"ref": {"kind": "K", "name": "n"}, "tags": ["t"]}),
                    ),
                    Step::Apply("a", json!({"tags": ["t"]})),
                ],
                conflict: None,
                spec: json!({"tags": ["t"]}),
                owners: vec![("a", json!({"f:spec": {"f:tags": {"v:\"t\"": {}}}}))],
            },
            Case {
                name: "an update inside an atomic struct takes the whole struct",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}})),
                    Step::Update(
                        "editor",
                        json!({"ref": {"kind": "K", "name": "n", "namespace": "x"}}),
                    ),
                    Step::Apply("a", json!({"ref": {"kind": "K", "name": "n"}})),
                ],
                conflict: Some(
                    "Apply failed with 1 conflict: conflict with \"editor\" using v1: .spec.ref",
                ),
                spec: json!({"ref": {"kind": "K", "name": "n", "namespace": "x"}}),
                owners: vec![
                    ("a", Value::Null),
                    ("editor", json!({"f:spec": {"f:ref": {}}})),
                ],
            },
            Case {
                name: "an atomic map is one field, replaced as a whole",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"labels": {"x": "1", "y": "2"}})),
                    Step::Apply("a", json!({"labels": {"z": "3"}})),
                ],
                conflict: None,
                spec: json!({"labels": {"z": "3"}}),
                owners: vec![("a", json!({"f:spec": {"f:labels": {}}}))],
            },
            Case {
                name: "an atomic list is one field; a set is item by item",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"args": ["x", "y"], "tags": ["x"]})),
                    Step::Apply("b", json!({"tags": ["y"]})),
                ],
                conflict: None,
                spec: json!({"args": ["x", "y"], "tags": ["x", "y"]}),
                owners: vec![
                    (
                        "a",
                        json!({"f:spec": {"f:args": {}, "f:tags": {"v:\"x\"": {}}}}),
                    ),
                    ("b", json!({"f:spec": {"f:tags": {"v:\"y\"": {}}}})),
                ],
            },
            Case {
                name: "changing another applier's atomic list conflicts on the list",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply("a", json!({"args": ["x", "y"]})),
                    Step::Apply("b", json!({"args": ["x"]})),
                ],
                conflict: Some("Apply failed with 1 conflict: conflict with \"a\": .spec.args"),
                spec: json!({"args": ["x", "y"]}),
                owners: vec![],
            },
            Case {
                name: "an atomic struct inside an associative list item",
                versions: marked_kind,
                wrap: custom,
                steps: vec![
                    Step::Apply(
                        "a",
                        json!({"targets": [{"name": "t", "ref": {"kind": "K", "name": "n"}}]}),
                    ),
                    Step::Apply(
                        "a",
                        json!({"targets": [{"name": "t", "ref": {"name": "m"}}]}),
                    ),
                ],
                conflict: None,
                spec: json!({"targets": [{"name": "t", "ref": {"name": "m"}}]}),
                owners: vec![(
                    "a",
                    json!({"f:spec": {"f:targets": {"k:{\"name\":\"t\"}": {".": {}, "f:name": {}, "f:ref": {}}}}}),
                )],
            },
            Case {
                name: "a Deployment's label selector is atomic, its template's labels granular",
                versions: deployment,
                wrap: dep,
                steps: vec![
                    Step::Apply(
                        "a",
                        json!({"selector": {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "k", "operator": "Exists"}]},
                        "template": {"metadata": {"labels": {"app": "x"}}}}),
                    ),
                    Step::Apply(
                        "a",
                        json!({"selector": {"matchLabels": {"app": "x"}},
                        "template": {"metadata": {"labels": {"app": "x"}}}}),
                    ),
                ],
                conflict: None,
                spec: json!({"selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}}}}),
                owners: vec![(
                    "a",
                    json!({"f:spec": {"f:selector": {}, "f:template": {"f:metadata": {"f:labels": {"f:app": {}}}}}}),
                )],
            },
            Case {
                name: "another applier's selector labels conflict on the selector",
                versions: deployment,
                wrap: dep,
                steps: vec![
                    Step::Apply("a", json!({"selector": {"matchLabels": {"app": "x"}}})),
                    Step::Apply(
                        "b",
                        json!({"selector": {"matchLabels": {"app": "x", "tier": "y"}}}),
                    ),
                ],
                conflict: Some("Apply failed with 1 conflict: conflict with \"a\": .spec.selector"),
                spec: json!({"selector": {"matchLabels": {"app": "x"}}}),
                owners: vec![],
            },
            Case {
                name: "a Pod template's nodeSelector and secretKeyRef are atomic",
                versions: deployment,
                wrap: dep,
                steps: vec![
                    Step::Apply(
                        "a",
                        json!({"template": {"spec": {"nodeSelector": {"zone": "a", "disk": "ssd"},
                        "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": true}}}]}]}}}),
                    ),
                    Step::Apply(
                        "a",
                        json!({"template": {"spec": {"nodeSelector": {"zone": "b"},
                        "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}]}]}}}),
                    ),
                ],
                conflict: None,
                spec: json!({"template": {"spec": {"nodeSelector": {"zone": "b"},
                    "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}]}]}}}),
                owners: vec![(
                    "a",
                    json!({"f:spec": {"f:template": {"f:spec": {"f:nodeSelector": {}, "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:name": {}, "f:env": {"k:{\"name\":\"E\"}": {".": {}, "f:name": {}, "f:valueFrom": {"f:secretKeyRef": {}}}}}}}}}}),
                )],
            },
        ];
        for case in cases {
            run(case);
        }
    }
}
