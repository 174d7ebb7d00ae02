//! capstan lint: static analysis of CAPI / Metal3 manifest sets.
