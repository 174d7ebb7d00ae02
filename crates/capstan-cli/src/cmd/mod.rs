//! Subcommands, one module each, and the dispatch from the parsed command line.

mod apply;
mod backup;
mod bench;
mod bench_clusters;
mod bench_hosts;
mod bench_image;
mod bench_kvm;
mod bundle;
mod clusterctl;
mod controllers;
mod convert;
mod crds;
mod delete;
mod describe;
mod describe_cluster;
pub(crate) mod get;
mod image;
mod kubeconfig;
mod lint;
mod ramdisk;
mod render;
mod serve;
mod undecodable;
mod upstream;

use crate::output::{Exit, Style};

/// How long a long-running command waits for its remaining tasks after it has stopped them.
const RUNTIME_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Render a cluster spec into a complete, apply-ready CAPI + Metal3 bundle.
    Render(render::Args),
    /// Check CAPI / Metal3 manifests for the field's known pitfalls.
    Lint(lint::Args),
    /// Rewrite Cluster API manifests from v1alpha4 / v1beta1 to v1beta2, keeping comments;
    /// refuses (exit 1, nothing written) what would lose a field.
    Convert(convert::Args),
    /// Run the embedded management plane: a Kubernetes-compatible API over SQLite.
    Serve(serve::Args),
    /// Print the admin kubeconfig of `capstan serve`.
    Kubeconfig(kubeconfig::Args),
    /// Write a consistent snapshot of a running (or stopped) `capstan serve`.
    Backup(backup::Args),
    /// Create or update objects from manifests.
    Apply(apply::Args),
    /// List objects (a table, or YAML, JSON or names), optionally following changes.
    Get(get::Args),
    /// Show an object's spec, status, conditions and recent events.
    Describe(describe::Args),
    /// Delete objects.
    Delete(delete::Args),
    /// Run capstan's controllers against a real Kubernetes management cluster (leader-elected).
    Controllers(controllers::Args),
    /// Print the CustomResourceDefinitions capstan's controllers need.
    Crds(crds::Args),
    /// Write the KVM provider's clusterctl files: cluster-template.yaml, metadata.yaml and
    /// infrastructure-components.yaml.
    ClusterctlTemplate(clusterctl::Args),
    /// Measure the embedded management plane (and etcd as the yardstick).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The provisioning ramdisk the BareMetalHost controller boots hosts into.
    #[command(subcommand)]
    Ramdisk(ramdisk::RamdiskCommand),
    /// The Kubernetes node image (Debian, containerd, kubelet, kubeadm and kubeadm's images) that
    /// Metal3 and KVM machines boot.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// List (and with --remove, remove) stored rows the server cannot decode.
    Undecodable(undecodable::Args),
    /// The offline install bundle: create one, install one on an air-gapped host, verify one.
    #[command(subcommand)]
    Bundle(bundle::BundleCommand),
}

/// What `capstan bench` measures.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// The API and its store: throughput, watch latency, memory, restart time; etcd beside it.
    Store(bench::Args),
    /// BareMetalHosts with fake BMCs from registration to available to provisioned: time, CPU, memory.
    Hosts(bench_hosts::Args),
    /// The agent's raw image write against dd to the same kind of target.
    ImageWrite(bench_image::Args),
    /// Clusters (1 control plane + workers) on fake hosts and simulated workload clusters, from
    /// creation to every Machine Running to deletion: time, CPU, memory, API requests.
    Clusters(bench_clusters::Args),
    /// KVM clusters (KVMMachines on libvirt's simulated hypervisors) from creation to every
    /// Machine Running to deletion; with `--real URI`, capstan's own time per real VM.
    Kvm(bench_kvm::Args),
}

/// Runs one subcommand; errors that escape are reported as "could not read" (exit 2).
pub fn run(command: Command, style: &Style) -> anyhow::Result<Exit> {
    match command {
        Command::Render(args) => render::run(args, style),
        Command::Lint(args) => lint::run(args, style),
        Command::Convert(args) => convert::run(args, style),
        Command::Serve(args) => serve::run(args, style),
        Command::Kubeconfig(args) => kubeconfig::run(args),
        Command::Backup(args) => backup::run(args, style),
        Command::Apply(args) => apply::run(args, style),
        Command::Get(args) => get::run(args, style),
        Command::Describe(args) => describe::run(args, style),
        Command::Delete(args) => delete::run(args, style),
        Command::Bench(BenchCommand::Store(args)) => bench::run(args),
        Command::Bench(BenchCommand::Hosts(args)) => bench_hosts::run(args),
        Command::Bench(BenchCommand::ImageWrite(args)) => bench_image::run(args),
        Command::Bench(BenchCommand::Clusters(args)) => bench_clusters::run(args),
        Command::Bench(BenchCommand::Kvm(args)) => bench_kvm::run(args),
        Command::Controllers(args) => controllers::run(args, style),
        Command::Crds(args) => crds::run(args),
        Command::ClusterctlTemplate(args) => clusterctl::run(args),
        Command::Ramdisk(command) => ramdisk::run(command, style),
        Command::Image(command) => image::run(command, style),
        Command::Undecodable(args) => undecodable::run(args, style),
        Command::Bundle(command) => bundle::run(command, style),
    }
}
