//! The cross-object rules, one module per topic. Each module has a `check` that reads the
//! [`Ctx`] and appends findings.

mod bmc;
mod capacity;
mod cilium;
mod images;
mod interfaces;
mod kube_vip;
pub(crate) mod network;
mod notes;
mod providers;
mod references;
pub(crate) mod schema;
mod schemes;
mod versions;

use crate::diagnostic::Diagnostic;
use crate::index::Index;

/// What every rule reads: the indexed set, the options, and facts derived once for several rules.
pub(crate) struct Ctx<'i, 'a> {
    pub index: &'i Index<'a>,
    /// `--partial`: the set is not the whole story, so "not in the set" proves nothing.
    pub partial: bool,
    /// Every host's parsed networkData.
    pub networks: &'i [network::HostNetwork<'a>],
}

/// Runs every cross-object rule.
pub(crate) fn run(index: &Index<'_>, partial: bool, out: &mut Vec<Diagnostic>) {
    let networks = network::collect(index, partial, out);
    let ctx = Ctx {
        index,
        partial,
        networks: &networks,
    };
    references::check(&ctx, out);
    versions::check(&ctx, out);
    images::check(&ctx, out);
    bmc::check(&ctx, out);
    schemes::check(&ctx, out);
    network::check(&ctx, out);
    kube_vip::check(&ctx, out);
    interfaces::check(&ctx, out);
    cilium::check(&ctx, out);
    capacity::check(&ctx, out);
    providers::check(&ctx, out);
    notes::check(&ctx, out);
}
