//! capstan render: a concise cluster spec becomes a complete, apply-ready CAPI + Metal3 bundle.
