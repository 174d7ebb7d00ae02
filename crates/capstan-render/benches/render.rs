//! Rendering a generated 1,000-host cluster: checking the spec, building every object and
//! serialising the bundle (nothing is written to disk).

use std::hint::black_box;

use capstan_render::generate::{CILIUM_MANIFEST_PATH, SAMPLE_CILIUM_MANIFEST, generated_spec};
use capstan_render::{RenderOptions, render};
use criterion::{Criterion, criterion_group, criterion_main};

fn render_1000_hosts(c: &mut Criterion) {
    let spec_dir = tempfile::tempdir().expect("temporary directory");
    let manifest = spec_dir.path().join(CILIUM_MANIFEST_PATH);
    if let Some(parent) = manifest.parent() {
        std::fs::create_dir_all(parent).expect("create the manifest directory");
    }
    std::fs::write(&manifest, SAMPLE_CILIUM_MANIFEST).expect("write the Cilium manifest");
    let spec = generated_spec(1000);
    let options = RenderOptions::default();
    let mut group = c.benchmark_group("render");
    group.sample_size(20);
    group.bench_function("1000 hosts", |b| {
        b.iter(|| render(black_box(&spec), spec_dir.path(), &options).expect("renders"));
    });
    group.finish();
}

criterion_group!(benches, render_1000_hosts);
criterion_main!(benches);
