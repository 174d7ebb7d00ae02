//! The bundles `capstan render` writes for the examples convert both ways: every Cluster API and
//! CAPM3 object round-trips exactly, validates in the other version, and rendered as v1beta1 then
//! converted it is exactly what the renderer writes for v1beta2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use capstan_model::convert::{CONVERSION_DATA_ANNOTATION, convert, handles};
use capstan_model::meta::group_of;
use capstan_render::{CapiVersion, RenderOptions};
use capstan_schema::{CrdSet, validate};
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn rendered(example: &str, api_version: CapiVersion) -> Vec<Value> {
    let spec = capstan_render::load_spec(&examples_dir().join(example)).unwrap();
    let bundle =
        capstan_render::render(&spec, &examples_dir(), &RenderOptions { api_version }).unwrap();
    let mut objects = Vec::new();
    for file in &bundle.files {
        let path = file.path.to_string_lossy().into_owned();
        if path.ends_with(".yaml") {
            let loaded = capstan_manifest::load_str(&path, &file.contents).unwrap();
            objects.extend(loaded.into_iter().map(|o| o.value));
        }
    }
    objects
        .into_iter()
        .filter(|o| {
            let api_version = o["apiVersion"].as_str().unwrap_or_default();
            handles(
                group_of(api_version),
                o["kind"].as_str().unwrap_or_default(),
            )
        })
        .collect()
}

fn crds() -> CrdSet {
    CrdSet::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds"))
        .unwrap()
}

fn other_version(api_version: &str) -> String {
    match api_version.rsplit_once('/') {
        Some((group, "v1beta1")) => format!("{group}/v1beta2"),
        Some((group, _)) => format!("{group}/v1beta1"),
        None => panic!("{api_version} has no group"),
    }
}

fn without_conversion_data(mut object: Value) -> Value {
    if let Some(annotations) = object["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(CONVERSION_DATA_ANNOTATION);
        if annotations.is_empty() {
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
    }
    object
}

#[test]
fn rendered_examples_round_trip_and_validate_in_both_versions() {
    let crds = crds();
    let mut converted_objects = 0;
    for example in ["capi-1.yaml", "super.yaml"] {
        for version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            for object in rendered(example, version) {
                let api_version = object["apiVersion"].as_str().unwrap().to_owned();
                let target = other_version(&api_version);
                let converted = convert(object.clone(), &target).unwrap();
                let schema = crds
                    .schema_for(&target, object["kind"].as_str().unwrap())
                    .unwrap();
                let violations = validate(schema, &converted);
                assert!(
                    violations.is_empty(),
                    "{example}: {} {}: {violations:?}",
                    object["kind"],
                    object["metadata"]["name"]
                );
                assert_eq!(convert(converted, &api_version).unwrap(), object);
                converted_objects += 1;
            }
        }
    }
    assert!(converted_objects >= 30, "only {converted_objects} objects");
}

/// Each object rendered in `from`, converted to `to`, compared with the object rendered in `to`
/// (the conversion annotation aside). Only v1beta1 → v1beta2 can match: going down, references
/// get the object's namespace (as upstream's conversion gives them) where the renderer writes
/// none, and the v1beta1 rendering repeats the Cluster's networking in `clusterConfiguration`.
fn assert_conversion_matches_rendering(from: CapiVersion, to: CapiVersion) {
    for example in ["capi-1.yaml", "super.yaml"] {
        let expected = rendered(example, to);
        for object in rendered(example, from) {
            let counterpart = expected
                .iter()
                .find(|o| {
                    o["kind"] == object["kind"]
                        && o["metadata"]["name"] == object["metadata"]["name"]
                })
                .unwrap();
            let target = counterpart["apiVersion"].as_str().unwrap();
            let converted = without_conversion_data(convert(object.clone(), target).unwrap());
            assert_eq!(
                &converted, counterpart,
                "{example}: {} {}",
                object["kind"], object["metadata"]["name"]
            );
        }
    }
}

#[test]
fn rendered_v1beta1_converts_to_what_the_renderer_writes_as_v1beta2() {
    assert_conversion_matches_rendering(CapiVersion::V1beta1, CapiVersion::V1beta2);
}
