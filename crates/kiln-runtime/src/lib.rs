//! kiln runtime (DESIGN.md layer 8).
