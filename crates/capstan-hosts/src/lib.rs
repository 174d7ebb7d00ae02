//! The BareMetalHost controller.
pub mod state;
