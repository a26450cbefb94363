//! kiln loop IR (DESIGN.md layer 6).
