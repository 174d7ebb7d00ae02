//! Shared helpers of the integration tests: rendering the examples, locating the reference CRDs
//! and the external tools the tests drive.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use capstan_render::{Bundle, CapiVersion, RenderOptions, Spec};

/// The repository's `examples/` directory.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"))
}

/// The upstream CRDs the rendered objects must satisfy.
pub fn crds_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/crds"
    ))
}

/// Nova's JSON schema of `network_data.json`.
pub fn network_data_schema() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/network_data.schema.json"
    ))
}

/// Both examples, by file name.
pub const EXAMPLES: [&str; 2] = ["capi-1.yaml", "super.yaml"];

/// Both API versions.
pub const VERSIONS: [CapiVersion; 2] = [CapiVersion::V1beta1, CapiVersion::V1beta2];

pub fn load_example(name: &str) -> Spec {
    capstan_render::load_spec(&examples_dir().join(name))
        .unwrap_or_else(|err| panic!("{name}: {err}"))
}

pub fn render(spec: &Spec, api_version: CapiVersion) -> Bundle {
    capstan_render::render(spec, &examples_dir(), &RenderOptions { api_version })
        .unwrap_or_else(|err| panic!("{err}"))
}

pub fn render_example(name: &str, api_version: CapiVersion) -> Bundle {
    render(&load_example(name), api_version)
}

/// Every object of every YAML file of a bundle, with the file it came from.
pub fn objects(bundle: &Bundle) -> Vec<(String, serde_json::Value)> {
    let mut all = Vec::new();
    for file in &bundle.files {
        let path = file.path.to_string_lossy().into_owned();
        if !path.ends_with(".yaml") {
            continue;
        }
        let loaded = capstan_manifest::load_str(&path, &file.contents)
            .unwrap_or_else(|err| panic!("{path} does not read back: {err}"));
        all.extend(loaded.into_iter().map(|o| (path.clone(), o.value)));
    }
    all
}

/// The objects of one kind.
pub fn of_kind<'a>(
    objects: &'a [(String, serde_json::Value)],
    kind: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> + 'a {
    objects
        .iter()
        .filter(move |(_, o)| o["kind"] == kind)
        .map(|(_, o)| o)
}

/// The path of an external tool the tests drive; fails (never skips) when it is missing.
pub fn require_tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed, and this test runs it as the judge of capstan's output; \
             run scripts/test.sh (scripts/install-deps.sh installs cloud-init and frr)"
        )
    })
}

/// Runs a command, failing the test with its output when it does not succeed.
pub fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout + &stderr
}

/// The Python that runs cloud-init (its modules, `yaml` and `jsonschema`, are installed for it).
pub fn cloud_init_python() -> PathBuf {
    let cloud_init = require_tool("cloud-init");
    let text = std::fs::read_to_string(&cloud_init).unwrap_or_default();
    let interpreter = text
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("#!"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_default();
    match interpreter.as_slice() {
        [env, program, ..] if env.ends_with("/env") => require_tool(program),
        [program, ..] => PathBuf::from(program),
        [] => require_tool("python3"),
    }
}

/// Writes `contents` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create dir");
    }
    std::fs::write(&path, contents).expect("write");
    path
}
