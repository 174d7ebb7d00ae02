//! The `capstan` command line.
fn main() {}
